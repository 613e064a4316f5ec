"""What tests/unit/controller/test_gang_decide.py shares with other tests (so that no test module imports
another). That module: A gang cluster's pass: the rule of controller/gang.py turned into actions.
"""

from __future__ import annotations

import json
from typing import Any

from raykueue.controller import actions as a
from raykueue.controller.gang import decide as gd
from raykueue.core import contract as c
from testkit import controller_objects as o

GROUP = "gpu-group"


CTX = gd.GangContext(flavors={o.FLAVOR: {"metadata": {"name": o.FLAVOR},
                                         "spec": {"nodeLabels": {"pool": "gpu"}}}},
                     priority_values={"ray-head": 1000, "ray-worker": 100})


def gang_pod(role: str, n: int, **kw: Any) -> dict[str, Any]:
    pod = o.pod(role, **kw)
    pod["metadata"]["labels"][c.GANG_LABEL] = "raycluster-gpu"
    pod["metadata"].setdefault("annotations", {})[c.GANG_MIN_ANNOTATION] = json.dumps({GROUP: 2})
    pod["metadata"]["creationTimestamp"] = f"2026-01-01T00:00:{n:02d}Z"
    return pod


def cluster(workers: int, **kw: Any) -> list[dict[str, Any]]:
    return [gang_pod(c.ROLE_HEAD, 0, **kw)] + [gang_pod(c.ROLE_WORKER, i + 1, **kw)
                                               for i in range(workers)]


def base_for(pods: list[dict[str, Any]], state: str, reclaimed: dict[str, int] | None = None
             ) -> dict[str, Any]:
    steps, _ = gd.decide_gang(pods, {}, None, CTX)
    (create,) = [x for _, x in steps if isinstance(x, a.CreateWorkload)]
    base = o.workload(pods[0], state)
    base["metadata"].update({k: v for k, v in create.body["metadata"].items()})
    base["spec"] = dict(create.body["spec"])
    if "admission" in base.get("status", {}):
        base["status"]["admission"]["podSetAssignments"] = [
            {"name": ps["name"], "count": ps["count"], "flavors": {"cpu": o.FLAVOR}}
            for ps in base["spec"]["podSets"]]
    if reclaimed:
        base["status"]["reclaimablePods"] = [{"name": k, "count": n} for k, n in reclaimed.items()]
    return base


def kinds(steps: list[gd.Step]) -> list[tuple[str | None, str]]:
    return [(name, type(x).__name__) for name, x in steps]
