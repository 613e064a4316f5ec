"""What tests/e2e/test_gang.py shares with other tests (so that no test module imports another). That
module: Gang start on the shipped stack: two clusters that each need a head and 4 workers, room for one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from raykueue.controller import workload as w
from raykueue.controller.gang import base as gb
from raykueue.core import contract as c
from raykueue.kube.rest import Rest
from testkit.e2e.controller import (
    cq_usage,
    millicores,
    pods,
    raycluster,
)
from testkit.invariants import WORKLOADS, GangInvariants, InvariantBroken
from testkit.pods import gated, running
from testkit.waiting import wait_for

BASE = 5  # head + 4 min workers


T = TypeVar("T")


def cluster(name: str, gang: bool) -> dict[str, Any]:
    obj = raycluster(name, BASE - 1, cpu="500m", memory="512Mi")
    obj["spec"]["workerGroupSpecs"][0]["minReplicas"] = BASE - 1
    if gang:
        obj["metadata"]["annotations"][c.GANG_ANNOTATION] = "true"
    return obj


# Every gang scenario runs inside this watcher (testkit/invariants.py), and every wait
# fails at once on a broken invariant, naming it, instead of timing out after it.
GangWatch = GangInvariants


def until(gw: GangInvariants, cond: Callable[[], T], timeout: float, message: str | Callable[[], str]
          ) -> T:
    """wait_for, with the gang's invariants checked at every poll."""
    def check() -> T:
        gw.check()
        return cond()

    return wait_for(check, timeout=timeout, message=message, fatal=(InvariantBroken,))


def cq_cpu_reaches_held(gw: GangInvariants, api: Rest, ns: str, want_millicores: int) -> None:
    """The ClusterQueue's reserved cpu reaches `want_millicores` (Kueue writes it on its own
    schedule, after the Workloads), the invariants holding meanwhile."""
    def cpu() -> int:
        return millicores(cq_usage(api, ns).get("cpu", "0"))

    until(gw, lambda: cpu() == want_millicores, timeout=60,
          message=lambda: f"ClusterQueue cpu reservation == {want_millicores}m, is {cpu()}m")


def started(api: Rest, ns: str, name: str) -> list[dict[str, Any]]:
    return [p for p in pods(api, ns, name) if running(p) and not gated(p)]


def base_of(api: Rest, ns: str, name: str) -> dict[str, Any] | None:
    for wl in api.get(WORKLOADS.path(ns))["items"]:
        if gb.is_base(wl) and wl["metadata"]["labels"].get(c.GANG_LABEL) == name:
            return wl
    return None


def own_workload_pods(api: Rest, ns: str) -> set[str]:
    return {w.pod_uid_of(x) or "" for x in api.get(WORKLOADS.path(ns))["items"]
            if w.is_ours(x) and not gb.is_base(x) and not x["metadata"].get("deletionTimestamp")}
