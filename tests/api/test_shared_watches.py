"""One watch per resource per process: a leading `raykueue serve` watches RayClusters once.

The admission side and the controller both read RayClusters; the controller
borrows the admission side's watch (kube/informers.py). Counted by the API
server itself: its gauge of open long-running requests, by verb and resource.
"""

from __future__ import annotations

import re

from raykueue.kube.client import load_api_client
from raykueue.kube.rest import Rest
from testkit.servers import sole_leader, start_replicas
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.waiting import wait_for

RAY_KINDS = ("rayclusters", "rayjobs", "rayservices")
CONTROLLER_WATCHES = {"pods": 2, "workloads": 1, "resourceflavors": 1, "workloadpriorityclasses": 1}
GAUGE = re.compile(r"^apiserver_longrunning_requests\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


def open_watches(rest: Rest) -> dict[str, int]:
    """resource -> WATCH requests the API server is serving now."""
    found: dict[str, int] = {}
    for line in str(rest.request("GET", "/metrics")).splitlines():
        match = GAUGE.match(line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
        if labels.get("verb") == "WATCH":
            resource = labels.get("resource", "")
            found[resource] = found.get(resource, 0) + int(float(match["value"]))
    return found


def test_a_leading_replica_watches_rayclusters_once(api_stack, new_namespace, tmp_path) -> None:  # noqa: F811
    ns = new_namespace("watches")
    rest = Rest(load_api_client(str(api_stack.kubeconfig)))
    before = open_watches(rest)
    [replica] = start_replicas(api_stack, tmp_path, {"RAYKUEUE_LEASE_NAMESPACE": ns}, count=1)
    try:
        sole_leader([replica], timeout=60)
        # The controller's own watches open once it leads: pods twice (ours, and every
        # Ray head by another selector), Workloads, flavors, WorkloadPriorityClasses.
        running = wait_for(
            lambda: (now := open_watches(rest)) and all(
                now.get(k, 0) - before.get(k, 0) >= n for k, n in CONTROLLER_WATCHES.items())
            and now, timeout=60, message="the controller's watches to open")
    finally:
        replica.stop()
    # The stack's own components watch too (kube-controller-manager, Kueue): what the
    # replica held is what closes when it goes, all its connections at once.
    after = wait_for(
        lambda: (now := open_watches(rest)) and all(
            running.get(k, 0) - now.get(k, 0) >= n for k, n in CONTROLLER_WATCHES.items())
        and now, timeout=60, message="the replica's watches to close")
    held = {k: running.get(k, 0) - after.get(k, 0) for k in RAY_KINDS + tuple(CONTROLLER_WATCHES)}
    # RayClusters once: the controller borrowed the webhook's watch rather than open its own.
    assert held == {**dict.fromkeys(RAY_KINDS, 1), **CONTROLLER_WATCHES}, held
