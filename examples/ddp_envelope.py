"""(c) An envelope drafted from code: a DDP training job.

`draft_envelope` reads code snippets and command lines (not files): `torch.distributed` and
`torchrun --nproc_per_node=4` mark a multi-GPU DDP job, `DataLoader(num_workers=8)` sizes the
CPUs per GPU. It returns min-viable / max-useful bounds with the signals it used; review them,
then pass `envelope` to submit_task. Nothing is submitted here.

    FEDHPC_DEVFED=1 python examples/ddp_envelope.py
"""

from __future__ import annotations

import json

import anyio
from _fedhpc import call, connect

CODE = [
    "import torch.distributed as dist\n"
    "from torch.nn.parallel import DistributedDataParallel as DDP\n"
    "dist.init_process_group('nccl')\n"
    "model = DDP(model.cuda(), device_ids=[local_rank])",
    "loader = DataLoader(train_set, batch_size=64, sampler=sampler, num_workers=8)",
    "torchrun --nproc_per_node=4 train.py --epochs 10",
]


async def main() -> None:
    async with connect() as client:
        draft = await call(
            client,
            "draft_envelope",
            description="train a ResNet-50 on ImageNet with PyTorch DDP on one node",
            code_context=CODE,
        )
    env = draft["envelope"]
    print(f"workload: {draft['workload']} (confidence {draft['confidence']:.1f})")
    print(f"signals: {', '.join(draft['signals'])}")
    for dim in ("gpus", "cpus", "memory", "nodes", "wall_time"):
        print(f"  {dim:<10} min {env[dim]['min']!s:>7}  max {env[dim]['max']!s:>7}")
    print(f"rationale: {draft['rationale']}")
    shown = json.dumps({k: env[k] for k in ("gpus", "cpus", "wall_time")})
    print(
        f"next: submit_task(command=['torchrun', '--nproc_per_node=4', 'train.py'], "
        f"envelope={shown})"
    )


if __name__ == "__main__":
    anyio.run(main)
