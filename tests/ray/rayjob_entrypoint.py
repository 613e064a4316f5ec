"""A RayJob's entrypoint for the Ray tier: run by Ray on the head, not by pytest.

    python rayjob_entrypoint.py TASKS OUT

Submits TASKS one-CPU tasks. The head has no CPU, so each needs a worker the
autoscaler asks for. Each task signs a roll and holds its worker's one CPU
until TASKS tasks have signed, so that they run side by side on a worker each,
then says which pod it ran on and when the roll was full. (Waiting for TASKS
workers to be alive was not enough: a task that returned as the last worker
joined freed its CPU, and Ray could put the next task on that same worker.)
What Ray saw goes to OUT (JSON), which outlives the cluster, and to the job's
log.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import ray
from ray.experimental import internal_kv

POD_LABEL = "raykueue.io/pod"  # devstack.ray.node.POD_LABEL; Ray's Python has no devstack
NAMESPACE = "raykueue-tests"


def _roll() -> str:
    return f"roll/{ray.get_runtime_context().get_job_id()}/"


@ray.remote(num_cpus=1)
def held_until_all_signed(want: int) -> dict[str, Any]:
    # The roll is in GCS's key-value store, not in an actor: a task blocked in
    # ray.get() lends its CPU back to Ray, which would put the next task on this
    # same worker. A call to the store, like ray.nodes(), keeps the CPU held.
    pod, roll = os.environ.get("RAY_CLOUD_INSTANCE_ID", ""), _roll()
    internal_kv._internal_kv_put(roll + pod, b"", namespace=NAMESPACE)
    while len(internal_kv._internal_kv_list(roll, namespace=NAMESPACE)) < want:  # a poll, not a pause
        time.sleep(0.2)
    return {"pod": pod, "all_joined_at": time.time()}


def main() -> None:
    count, out = int(sys.argv[1]), sys.argv[2]
    ray.init(logging_level="warning", log_to_driver=False)
    results = ray.get([held_until_all_signed.remote(count) for _ in range(count)])
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
