"""A RayJob's entrypoint for the Ray tier: run by Ray on the head, not by pytest.

    python rayjob_entrypoint.py TASKS OUT

Submits TASKS one-CPU tasks. The head has no CPU, so each needs a worker the
autoscaler asks for; each task waits until TASKS such workers are alive in Ray,
so that they hold one worker each, side by side, then says which pod it ran on
and when it saw them all. What Ray saw goes to OUT (JSON), which outlives the
cluster, and to the job's log.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import ray

POD_LABEL = "raykueue.io/pod"  # devstack.ray_node.POD_LABEL; Ray's Python has no devstack


def _workers() -> list[dict[str, Any]]:
    return [n for n in ray.nodes() if n["Alive"] and n.get("Resources", {}).get("CPU", 0) > 0]


@ray.remote(num_cpus=1)
def held_until_all_joined(want: int) -> dict[str, Any]:
    while len(_workers()) < want:
        time.sleep(0.2)
    return {"pod": os.environ.get("RAY_CLOUD_INSTANCE_ID", ""), "all_joined_at": time.time()}


def main() -> None:
    count, out = int(sys.argv[1]), sys.argv[2]
    ray.init(logging_level="warning", log_to_driver=False)
    results = ray.get([held_until_all_joined.remote(count) for _ in range(count)])
    seen = {
        "results": [r["pod"] for r in results],
        "all_joined_at": min(r["all_joined_at"] for r in results),
        "nodes": [{"pod": n.get("Labels", {}).get(POD_LABEL, ""), "alive": n["Alive"],
                   "cpus": n.get("Resources", {}).get("CPU", 0)} for n in ray.nodes()],
    }
    with open(out + ".tmp", "w") as f:
        json.dump(seen, f)
    os.replace(out + ".tmp", out)
    print(json.dumps(seen), flush=True)


if __name__ == "__main__":
    main()
