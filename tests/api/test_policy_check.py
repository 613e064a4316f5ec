"""raykueue reports its ValidatingAdmissionPolicies that are not enforced (issue 28, item 5).

Installed with `kubectl apply -k manifests/` as tests/api/test_install.py does,
then one binding deleted (an install that skipped it): `raykueue serve` as the
installed ServiceAccount, with the shipped RBAC, names the policy on /readyz
(the "policies" check, detail only: the replica stays ready), in its log and in
`raykueue_policy_missing`; the binding put back, it says all three are
enforced and the gauge drops to 0. And the issue's own reproduction, on that
install: `kubectl --as=system:serviceaccount:raykueue-system:raykueue delete pod`
of a worker of a RayCluster that never opted in is refused; of a pod raykueue
manages, it goes.
"""

from __future__ import annotations

import json
import ssl
import urllib.request
from pathlib import Path
from typing import Any

import devstack
from raykueue.coexist.policies import GATED_AT_CREATION_POLICY, POLICIES
from raykueue.core import contract as c
from testkit.accounts import service_account_token, token_kubeconfig
from testkit.api.install import NAMESPACE, SERVICE_ACCOUNT, installed  # noqa: F401 - fixture
from testkit.servers import RaykueueServer, metrics_page
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.waiting import wait_for

BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"


def readyz(server: RaykueueServer) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=str(server.ca_file))
    with urllib.request.urlopen(server.url + "/readyz", context=context, timeout=5) as response:
        return json.loads(response.read())


def missing_gauge(server: RaykueueServer) -> dict[str, float]:
    page = metrics_page(server.url, server.ca_file)
    out = {}
    for line in page.splitlines():
        if line.startswith("raykueue_policy_missing{"):
            labels, value = line.rsplit(" ", 1)
            out[labels.split('policy="', 1)[1].split('"', 1)[0]] = float(value)
    return out


def test_a_binding_the_install_skipped_is_named_and_the_replica_stays_ready(
        installed: devstack.Stack, tmp_path: Path) -> None:  # noqa: F811
    api = installed.api
    binding = api.get(f"{BINDINGS}/{GATED_AT_CREATION_POLICY}")
    api.delete(f"{BINDINGS}/{GATED_AT_CREATION_POLICY}")
    kubeconfig = token_kubeconfig(installed, service_account_token(api, NAMESPACE, SERVICE_ACCOUNT),
                                  tmp_path / "sa.kubeconfig")
    server = RaykueueServer(installed, tmp_path, register=False, args=["--kubeconfig", str(kubeconfig)],
                            env={"KUBECONFIG": str(kubeconfig), "RAYKUEUE_POD_NAMESPACE": NAMESPACE,
                                 "RAYKUEUE_CONTROLLER": "false"})
    try:
        server.start()  # ready (/readyz 200) with the binding missing
        detail = wait_for(lambda: (d := readyz(server)["checks"]["policies"]["detail"])
                          and "PolicyMissing" in d and d, timeout=30,
                          message=lambda: f"the policies check to name the binding; log:\n{server.logs()}")
        assert f"ValidatingAdmissionPolicy {GATED_AT_CREATION_POLICY} has no " \
               "ValidatingAdmissionPolicyBinding" in detail, detail
        assert "runs outside quota" in detail  # what is unprotected without it
        assert all(name not in detail for name in POLICIES if name != GATED_AT_CREATION_POLICY)
        body = readyz(server)
        assert body["ready"] is True and body["checks"]["policies"]["ok"] is True
        assert missing_gauge(server) == {name: float(name == GATED_AT_CREATION_POLICY)
                                         for name in POLICIES}
        assert f"{GATED_AT_CREATION_POLICY} has no ValidatingAdmissionPolicyBinding" in server.logs(
            lines=100_000)

        meta = binding["metadata"]
        binding["metadata"] = {k: meta[k] for k in ("name", "labels") if k in meta}
        api.call("POST", BINDINGS, binding)
        wait_for(lambda: "enforced" in readyz(server)["checks"]["policies"]["detail"], timeout=30,
                 message=lambda: f"the finding to clear; log:\n{server.logs()}")
        assert missing_gauge(server) == dict.fromkeys(POLICIES, 0.0)
    finally:
        server.stop()
        if api.get_or_none(f"{BINDINGS}/{GATED_AT_CREATION_POLICY}") is None:
            meta = binding["metadata"]
            binding["metadata"] = {k: meta[k] for k in ("name", "labels") if k in meta}
            api.call("POST", BINDINGS, binding)


def test_kubectl_as_raykueue_cannot_delete_another_teams_ray_pod(
        installed: devstack.Stack, new_namespace) -> None:  # noqa: F811
    api = installed.api
    ns = new_namespace("other-team")
    cluster = api.call("POST", f"/apis/{c.RAY_API_GROUP}/v1/namespaces/{ns}/rayclusters", {
        "apiVersion": f"{c.RAY_API_GROUP}/v1", "kind": c.RAYCLUSTER_KIND, "metadata": {"name": "theirs"},
        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
            "containers": [{"name": "ray-head", "image": "rayproject/ray"}]}}}}})
    owner = [{"apiVersion": f"{c.RAY_API_GROUP}/v1", "kind": c.RAYCLUSTER_KIND, "name": "theirs",
              "uid": cluster["metadata"]["uid"], "controller": True}]
    for name, extra in (("theirs-worker", {}), ("managed", {c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE})):
        api.call("POST", f"/api/v1/namespaces/{ns}/pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "ownerReferences": owner,
            "labels": {c.NODE_TYPE_LABEL: c.ROLE_WORKER, c.CLUSTER_LABEL: "theirs", **extra}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    as_raykueue = f"--as={c.service_account_user(NAMESPACE, SERVICE_ACCOUNT)}"
    # The API server loads a policy through an informer: in force a moment after the install.
    wait_for(lambda: "raykueue-own-writes" in installed.kubectl(
        as_raykueue, "-n", ns, "delete", "pod", "theirs-worker", "--dry-run=server").stderr,
        timeout=30, interval=0.5, message="the installed policy to be in force")
    refused = installed.kubectl(as_raykueue, "-n", ns, "delete", "pod", "theirs-worker", "--wait=false")
    assert refused.returncode != 0, refused.stdout
    assert "raykueue-own-writes" in refused.stderr and "may delete only" in refused.stderr, refused.stderr
    assert api.get(f"/api/v1/namespaces/{ns}/pods/theirs-worker")["metadata"].get("deletionTimestamp") is None
    done = installed.kubectl(as_raykueue, "-n", ns, "delete", "pod", "managed", "--wait=false")
    assert done.returncode == 0, done.stderr

