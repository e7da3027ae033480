"""(b) The paper's four-worker group, preferring distinct systems.

Four single-GPU workers share one objective and one envelope; `spread=True` asks fedhpc to
place them on distinct systems when it can (a soft preference: a busy site still gets a
worker rather than leaving it unplaced). The script waits for the round's event and prints
where each worker ran.

    FEDHPC_DEVFED=1 python examples/group_spread.py
"""

from __future__ import annotations

import json
import uuid

import anyio
from _fedhpc import call, connect, latest_seq, wait_for


async def main() -> None:
    async with connect() as client:
        after = await latest_seq(client)
        group = await call(
            client,
            "submit_group",
            objective="evaluate four checkpoints, one GPU each, on distinct systems",
            children=[
                {
                    "command": ["bash", "-c", f"echo ckpt{i} on $(hostname); sleep 2"],
                    "name": f"ckpt{i}",
                }
                for i in range(4)
            ],
            envelope={"gpus": {"min": 1, "max": 1}, "wall_time": {"min": "5m", "max": "10m"}},
            spread=True,
            idempotency_key=f"example-group-{uuid.uuid4().hex[:12]}",
        )
        for child in group["children"]:
            where = f"{child['site']}/{child['partition']}" if "site" in child else "placing"
            print(f"placed {child['task_id']} -> {where}")

        event = await wait_for(client, group["group_id"], {"group.round_terminal"}, after=after)
        read = await client.read_resource(f"fedhpc://groups/{group['group_id']}")
        final = json.loads(getattr(read.contents[0], "text", "{}"))
        sites = []
        for child in final["children"]:
            result = await call(client, "get_result", task_id=child["task_id"])
            # One job in the task's state is flattened into the answer (same field names).
            site = (result["attempts"][-1] if "attempts" in result else result).get("site", "-")
            sites.append(site)
            print(f"{child['task_id']}: {result['state']} on {site}")
        print(f"event {event['kind']}: group {final['state']}, counts {final['counts']}")
        print(f"distinct systems: {len(set(sites))} of {len(sites)}")


if __name__ == "__main__":
    anyio.run(main)
