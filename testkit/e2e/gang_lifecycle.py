"""What tests/e2e/test_gang_lifecycle.py shares with other tests (so that no test module imports another).
That module: A gang cluster's life past its start, on the stack: head lost, base evicted, a slot handed
back.
"""

from __future__ import annotations

from typing import Any

from testkit.e2e.gang import (
    cluster,
)


def uids(pods: list[dict[str, Any]]) -> set[str]:
    return {p["metadata"]["uid"] for p in pods}


def with_extras(name: str, minimum: int, replicas: int) -> dict[str, Any]:
    obj = cluster(name, gang=True)
    obj["spec"]["workerGroupSpecs"][0].update(minReplicas=minimum, replicas=replicas)
    return obj
