"""Two replicas of `raykueue serve`: both serve, one leads, the other takes over."""

from __future__ import annotations

import json
import ssl
import urllib.request

from tests.stackfixtures import RaykueueServer, new_namespace  # noqa: F401 - fixture
from tests.waiting import wait_for


def controller_detail(server: RaykueueServer) -> str:
    context = ssl.create_default_context(cafile=str(server.ca_file))
    with urllib.request.urlopen(server.url + "/readyz", context=context, timeout=5) as response:
        return json.loads(response.read())["checks"]["controller"]["detail"]


def test_one_replica_leads_and_the_other_takes_over(api_stack, new_namespace, tmp_path) -> None:  # noqa: F811
    ns = new_namespace("lease")
    env = {"RAYKUEUE_LEASE_NAMESPACE": ns}
    for i in range(2):
        (tmp_path / str(i)).mkdir()
    replicas = [RaykueueServer(api_stack, tmp_path / str(i), register=False, env=env).start()
                for i in range(2)]
    try:
        def leaders() -> list[RaykueueServer]:
            return [r for r in replicas if r.running and controller_detail(r).startswith("leading")]

        first = wait_for(lambda: (found := leaders()) and len(found) == 1 and found[0],
                         timeout=30, message="exactly one leader")
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
