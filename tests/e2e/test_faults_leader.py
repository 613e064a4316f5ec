"""Two replicas of `raykueue serve`; the leader is SIGKILLed, the other takes over.

A killed leader cannot release its Lease: the other replica may only take
it once the Lease has expired, and must not take it sooner. Both replicas run
on this machine's clock, so "not sooner" is exact: the new holder's acquireTime
is at least leaseDurationSeconds after the dead holder's last renewTime. Expiry
is judged by observed time, so the takeover is due within the lease plus two
retries (plus jitter): one until the survivor first sees the last renewal, one
until it looks again after the lease has run out. The test allows
`within()` of that (a replica that misses its chance misses by whole retries or
leases) and prints the measured times, which bench/RESULTS.md records. The new
leader must then actually run the controller: a new gated pod gets its Workload.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from raykueue.app.settings import Settings
from raykueue.controller import workload as w
from raykueue.core.clock import parse_time
from testkit.api.controller import admin, ns, scope  # noqa: F401 - fixtures
from testkit.e2e.controller import webhooks  # noqa: F401 - fixture
from testkit.servers import (  # noqa: F401 - fixture
    RaykueueServer,
    controller_detail,
    sole_leader,
    start_replicas,
)
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.standins import create_pod, ray_pod, workload_of
from testkit.waiting import wait_for, within

LEASE = "raykueue-controller"
# The defaults `raykueue serve` runs with.
LEASE_SECONDS = float(Settings().lease_seconds)
RETRY_SECONDS = Settings().retry_seconds
JITTER = 0.2  # the elector waits retry * (1 + 0.2 * random) between attempts
POLL = 0.1


def test_leader_killed_the_other_replica_takes_over_within_the_lease(
        api_stack, admin, ns, scope, tmp_path: Path) -> None:  # noqa: F811
    env = {"RAYKUEUE_LEASE_NAMESPACE": ns, "RAYKUEUE_LOG_LEVEL": "WARNING"}
    replicas = start_replicas(api_stack, tmp_path, env)
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{LEASE}"
    try:
        leader = sole_leader(replicas)
        other = next(r for r in replicas if r is not leader)
        lease = api_stack.api.get(lease_path)["spec"]
        holder = lease["holderIdentity"]
        assert lease["leaseDurationSeconds"] == LEASE_SECONDS

        assert leader.proc is not None
        os.killpg(leader.proc.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        leader.proc.wait(timeout=10)
        leader.proc = None
        last_renewed = parse_time(api_stack.api.get(lease_path)["spec"]["renewTime"])

        def new_holder() -> str | None:
            spec = api_stack.api.get(lease_path)["spec"]
            return spec.get("holderIdentity") not in (None, "", holder) and spec["holderIdentity"]

        due = LEASE_SECONDS + 2 * RETRY_SECONDS * (1 + JITTER)
        wait_for(new_holder, timeout=within(due), interval=POLL, message="a new Lease holder")
        lease_moved = time.monotonic() - killed_at
        acquired = parse_time(api_stack.api.get(lease_path)["spec"]["acquireTime"])
        assert last_renewed is not None and acquired is not None
        waited = (acquired - last_renewed).total_seconds()
        assert waited >= LEASE_SECONDS, f"taken {waited:.2f}s after the last renewal"
        wait_for(lambda: controller_detail(other).startswith("leading"), timeout=within(due),
                 interval=POLL, message="the other replica to report leading")
        leading_after = time.monotonic() - killed_at
        print(f"\n[faults] leader SIGKILLed: Lease taken over after {lease_moved:.2f}s "
              f"({waited:.2f}s after its last renewal), /readyz 'leading' after "
              f"{leading_after:.2f}s (lease {LEASE_SECONDS:.0f}s, retry {RETRY_SECONDS:.0f}s: "
              f"due by {due:.1f}s)")

        # And it leads for real: a gated pod gets its Workload from the survivor.
        pod = create_pod(admin, ray_pod(ns, scope, "head", "rc-head-after-takeover"))
        wl = wait_for(lambda: workload_of(admin, pod), timeout=60,
                      message="a Workload made by the new leader")
        assert w.pod_uid_of(wl) == pod["metadata"]["uid"]
    finally:
        for replica in replicas:
            replica.stop()


@pytest.fixture(scope="module", autouse=True)
def _pods_pass_raykueues_webhook(webhooks) -> None:  # noqa: F811
    """The pods here are made as raykueue's webhook stores them; with Kueue as shipped,
    Kueue's pod webhook takes them on the way in, and only raykueue's takes them back."""
