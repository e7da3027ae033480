"""(a) One task with an envelope the agent wrote itself.

The agent proposes its own bounds (`proposed`, `source="assistant"`, with a rationale),
`draft_envelope` checks and normalizes them, and `submit_task` places the job on the best
feasible site within them. The script then waits for the task's event and reads the result.

    FEDHPC_DEVFED=1 python examples/single_task.py
"""

from __future__ import annotations

import uuid

import anyio
from _fedhpc import call, connect, latest_seq, wait_for


async def main() -> None:
    async with connect() as client:
        draft = await call(
            client,
            "draft_envelope",
            description="score a prompt file with a small model on one GPU",
            proposed={
                "gpus": {"min": 1, "max": 1},
                "cpus": {"min": 1, "max": 4},
                "memory": {"min": "1G", "max": "8G"},
                "wall_time": {"min": "5m", "max": "15m"},
            },
            source="assistant",
            rationale="the model fits on one GPU; scoring takes a few minutes",
            confidence=0.7,
        )
        if not draft["valid"]:
            raise SystemExit(f"envelope rejected: {draft['issues']}")
        envelope = draft["envelope"]
        print(
            f"envelope ({draft['source']}, valid): gpus {envelope['gpus']}, "
            f"wall_time {envelope['wall_time']}"
        )

        after = await latest_seq(client)
        handle = await call(
            client,
            "submit_task",
            command=["bash", "-c", "echo scored on $(hostname) GPUs=$CUDA_VISIBLE_DEVICES"],
            envelope=envelope,
            name="score-prompts",
            # One key per run of this script; a retry of this exact call reuses it (no 2nd job).
            idempotency_key=f"example-single-{uuid.uuid4().hex[:12]}",
        )
        where = f"{handle['site']}/{handle['partition']}" if "site" in handle else "placing"
        print(f"submitted {handle['task_id']} -> {where}: {handle['decision']}")

        # An agent ends its turn here; this script pulls the event log instead.
        event = await wait_for(client, handle["task_id"], {"task.terminal"}, after=after)
        result = await call(client, "get_result", task_id=handle["task_id"], preview="stdout")
        # One job that ended as the task did is flattened into the answer (same field names).
        attempt = result["attempts"][-1] if "attempts" in result else result
        print(
            f"event {event['kind']}: {result['state']} on {attempt['site']} "
            f"(exit {attempt.get('exit_code')})"
        )
        print(f"stdout: {result.get('preview', '').strip()}")


if __name__ == "__main__":
    anyio.run(main)
