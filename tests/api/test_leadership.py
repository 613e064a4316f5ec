"""Two replicas of `raykueue serve`: both serve, one leads, the other takes over."""

from __future__ import annotations

from testkit.servers import controller_detail, sole_leader, start_replicas
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.waiting import wait_for


def test_one_replica_leads_and_the_other_takes_over(api_stack, new_namespace, tmp_path) -> None:  # noqa: F811
    ns = new_namespace("lease")
    replicas = start_replicas(api_stack, tmp_path, {"RAYKUEUE_LEASE_NAMESPACE": ns})
    try:
        first = sole_leader(replicas, timeout=30)
        other = next(r for r in replicas if r is not first)
        assert controller_detail(other).startswith("standing by")

        lease = api_stack.api.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/raykueue-controller")
        holder = lease["spec"]["holderIdentity"]

        first.stop()  # SIGTERM: the leader releases the Lease on its way out
        wait_for(lambda: controller_detail(other).startswith("leading"), timeout=30,
                 message="the other replica to take over")
        lease = api_stack.api.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/raykueue-controller")
        assert lease["spec"]["holderIdentity"] not in ("", holder)
    finally:
        for replica in replicas:
            replica.stop()
