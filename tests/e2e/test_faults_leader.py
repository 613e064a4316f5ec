"""Two replicas of `raykueue serve`; the leader is SIGKILLed, the other takes over.

A killed leader cannot release its Lease: the other replica may only take
it once the Lease has expired (leaseDurationSeconds after the last renewal),
and notices at its next retry. So the takeover must come within the lease
duration plus one retry period (plus the retry jitter and this test's
polling), counted from the kill; the measured time is printed. The new
leader must then actually run the controller: a new gated pod gets its
Workload.
"""

from __future__ import annotations

import inspect
import os
import signal
import time
from pathlib import Path

from controller import workload as w
from kube.leader import LeaderElector
from tests.api.test_controller_api import (  # noqa: F401 - fixtures
    admin,
    create_pod,
    ns,
    ray_pod,
    scope,
    workload_of,
)
from tests.api.test_leadership import controller_detail
from tests.stackfixtures import RaykueueServer, new_namespace  # noqa: F401 - fixture
from tests.waiting import wait_for

LEASE = "raykueue-controller"
# The elector's defaults, which `raykueue serve` uses.
_DEFAULTS = inspect.signature(LeaderElector).parameters
LEASE_SECONDS = float(_DEFAULTS["lease_seconds"].default)
RETRY_SECONDS = float(_DEFAULTS["retry_seconds"].default)
JITTER = 0.2  # the elector waits retry * (1 + 0.2 * random) between attempts
POLL = 0.1


def test_leader_killed_the_other_replica_takes_over_within_the_lease(
        api_stack, admin, ns, scope, tmp_path: Path) -> None:  # noqa: F811
    env = {"RAYKUEUE_LEASE_NAMESPACE": ns, "RAYKUEUE_LOG_LEVEL": "WARNING"}
    replicas = []
    for i in range(2):
        (tmp_path / str(i)).mkdir()
        replicas.append(RaykueueServer(api_stack, tmp_path / str(i), register=False,
                                       env=env).start())
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{LEASE}"
    try:
        def leading() -> list[RaykueueServer]:
            return [r for r in replicas if r.running and controller_detail(r).startswith("leading")]

        leader = wait_for(lambda: (found := leading()) and len(found) == 1 and found[0],
                          timeout=60, message="exactly one leader")
        other = next(r for r in replicas if r is not leader)
        lease = api_stack.api.get(lease_path)["spec"]
        holder = lease["holderIdentity"]
        assert lease["leaseDurationSeconds"] == LEASE_SECONDS

        assert leader.proc is not None
        os.killpg(leader.proc.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        leader.proc.wait(timeout=10)
        leader.proc = None

        def new_holder() -> str | None:
            spec = api_stack.api.get(lease_path)["spec"]
            return spec.get("holderIdentity") not in (None, "", holder) and spec["holderIdentity"]

        bound = LEASE_SECONDS + RETRY_SECONDS * (1 + JITTER) + 2 * POLL
        wait_for(new_holder, timeout=bound + 30, interval=POLL, message="a new Lease holder")
        lease_moved = time.monotonic() - killed_at
        wait_for(lambda: controller_detail(other).startswith("leading"), timeout=30,
                 interval=POLL, message="the other replica to report leading")
        leading_after = time.monotonic() - killed_at
        print(f"\n[faults] leader SIGKILLed: Lease taken over after {lease_moved:.2f}s, "
              f"/readyz 'leading' after {leading_after:.2f}s (lease {LEASE_SECONDS:.0f}s, "
              f"retry {RETRY_SECONDS:.0f}s, bound {bound:.1f}s)")
        assert lease_moved <= bound
        assert leading_after <= bound + 1.0

        # And it leads for real: a gated pod gets its Workload from the survivor.
        pod = create_pod(admin, ray_pod(ns, scope, "head", "rc-head-after-takeover"))
        wl = wait_for(lambda: workload_of(admin, pod), timeout=60,
                      message="a Workload made by the new leader")
        assert w.pod_uid_of(wl) == pod["metadata"]["uid"]
    finally:
        for replica in replicas:
            replica.stop()
