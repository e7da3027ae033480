"""(d) A two-stage workflow across sites: CPU preprocessing on one site, a replica of its
output on another site, and a GPU task there that reads it.

1. `submit_task` runs the preprocessing on devanvil (fixed-site, CPUs only).
2. When it completes, `move_data` replicates its output to devdeltaai's scratch, site to site
   (the local backend here, Globus Transfer between real centers); the data never passes
   through the agent.
3. `submit_task` with `stage_in=[transfer_id]` submits the GPU task in the same step: it waits
   for the copy and runs where the data lands, so no site is named.
4. One event (the GPU task's) ends the workflow; its manifest names both sites, the transfer id
   and the checksums.

    FEDHPC_DEVFED=1 python examples/two_stage.py
"""

from __future__ import annotations

import json
import uuid

import anyio
from _fedhpc import call, connect, latest_seq, wait_for

CPU_SITE, GPU_SITE = "devanvil", "devdeltaai"


async def main() -> None:
    run = f"run-{uuid.uuid4().hex[:8]}"
    async with connect() as client:
        after = await latest_seq(client)
        pre = await call(
            client,
            "submit_task",
            command=["bash", "-c", "mkdir -p pre && seq 1 30000 > pre/features.dat"],
            envelope={"cpus": {"min": 1, "max": 2}, "wall_time": {"min": "5m"}},
            name="preprocess",
            policy="fixed-site",
            fixed_site=CPU_SITE,
            outputs=["pre/features.dat"],
            idempotency_key=f"example-pre-{run}",
        )
        print(
            f"stage 1: {pre['task_id']} -> {pre.get('site', 'placing')}/{pre.get('partition', '-')}"
        )
        await wait_for(client, pre["task_id"], {"task.terminal"}, after=after)
        done = await call(client, "get_result", task_id=pre["task_id"])
        if done["state"] != "completed":
            raise SystemExit(f"preprocessing ended {done['state']}: {done['reasons']}")
        (output,) = [o for o in done["outputs"] if o["kind"] == "artifact"]
        print(f"stage 1: completed; output {output.get('site', CPU_SITE)}:{output['path']}")

        # A task's default workdir is fedhpc/<task_id> under the site's scratch root.
        after = await latest_seq(client)
        xfer = await call(
            client,
            "move_data",
            source=f"{CPU_SITE}:scratch/fedhpc/{pre['task_id']}/pre/features.dat",
            destination=f"{GPU_SITE}:scratch/{run}/features.dat",
            mode="replicate",
        )
        print(
            f"stage-out: {xfer['transfer_id']} {xfer['source']} -> {xfer['destination']} "
            f"({xfer['backend']}, {xfer['state']})"
        )
        read = await client.read_resource(f"fedhpc://transfers/{xfer['transfer_id']}")
        landed = json.loads(getattr(read.contents[0], "text", "{}"))["destination_location"]

        train = await call(
            client,
            "submit_task",
            command=["bash", "-c", f'sha256sum "{landed["path"]}"; wc -l < "{landed["path"]}"'],
            envelope={"gpus": {"min": 1, "max": 1}, "wall_time": {"min": "5m"}},
            name="train",
            stage_in=[xfer["transfer_id"]],
            idempotency_key=f"example-train-{run}",
        )
        print(f"stage 2: {train['task_id']}: {train['decision']}")

        # An agent ends its turn here: exactly one event (the GPU task's) resumes it.
        event = await wait_for(client, train["task_id"], {"task.terminal"}, after=after)
        result = await call(client, "get_result", task_id=train["task_id"], preview="stdout")
    attempt = result["attempts"][-1] if "attempts" in result else result  # one job: flat
    print(f"event {event['kind']}: {result['state']} on {attempt['site']}")
    for d in result.get("data", []):
        print(
            f"data: {d['transfer_id']} {d['direction']} {d['source_site']} -> "
            f"{d['destination_site']} {d['bytes']} bytes sha256 {d['checksums']}"
        )
    digest, lines = result.get("preview", "").split()[0], result.get("preview", "").split()[-1]
    (expected,) = result["data"][0]["checksums"].values()
    print(f"gpu task read {lines} lines; checksum {'matches' if digest == expected else 'DIFFERS'}")


if __name__ == "__main__":
    anyio.run(main)
