"""Helm into a namespace other than raykueue-system: the gate is lifted.

Issue 21: the chart did not set the controller identity, so the server let only
system:serviceaccount:raykueue-system:raykueue lift its gate and its own
validating webhook refused its controller's lift: every opted-in pod stayed
Pending. Here the chart is rendered into a fresh namespace, its RBAC and
ServiceAccount applied to the real API server, and `raykueue serve` runs as
that ServiceAccount with the environment the kubelet would give it from the
rendered Deployment (testkit/podenv.py): its webhooks gate an opted-in pod, its
controller makes the Workload, and once "Kueue" admits it the controller's own
lift passes raykueue's validating webhook.
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path

import devstack
from devstack.controlplane.kubeapi import KubeError
from raykueue.core import contract as c
from testkit import reviews as rv
from testkit.accounts import service_account_token, token_kubeconfig
from testkit.api.chart import template
from testkit.api.install import FLAVORS, WORKLOADS, _admit
from testkit.podenv import kubelet_env
from testkit.servers import RaykueueServer
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.waiting import wait_for

KEPT_FROM_THE_DEPLOYMENT = ("RAYKUEUE_POD_NAMESPACE", "RAYKUEUE_SERVICE_ACCOUNT",
                            "RAYKUEUE_LEASE_NAMESPACE", "RAYKUEUE_KUEUE_NAMESPACE",
                            "RAYKUEUE_KUEUE_CONFIG_MAP")
CLUSTER_SCOPED = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings"}
RBAC = "/apis/rbac.authorization.k8s.io/v1"


def test_helm_in_another_namespace_lifts_the_gate(
        api_stack: devstack.Stack, new_namespace, tmp_path: Path) -> None:  # noqa: F811
    api = api_stack.api
    ns = new_namespace("helm-elsewhere")
    docs = {(d["kind"], d["metadata"]["name"]): d for d in template(ns)}
    made: list[str] = []
    flavor = f"helm-{ns}"
    server: RaykueueServer | None = None
    try:
        # The chart's ServiceAccount, Role and ClusterRole, bound as the chart binds
        # them (cluster-scoped names made unique to this test).
        api.call("POST", f"/api/v1/namespaces/{ns}/serviceaccounts",
                 docs[("ServiceAccount", "raykueue")])
        for kind in ("Role", "RoleBinding"):
            api.call("POST", f"{RBAC}/namespaces/{ns}/{kind.lower()}s", docs[(kind, "raykueue")])
        for kind, name in (("ClusterRole", "raykueue"), ("ClusterRoleBinding", "raykueue"),
                           ("ClusterRole", "raykueue-ca-injection"),
                           ("ClusterRoleBinding", "raykueue-ca-injection")):
            obj = copy.deepcopy(docs[(kind, name)])
            obj["metadata"]["name"] = f"{name}-{ns}"
            if kind == "ClusterRoleBinding":
                obj["roleRef"]["name"] = f"{obj['roleRef']['name']}-{ns}"
            api.call("POST", f"{RBAC}/{CLUSTER_SCOPED[kind]}", obj)
            made.append(f"{RBAC}/{CLUSTER_SCOPED[kind]}/{obj['metadata']['name']}")

        env = kubelet_env(docs[("Deployment", "raykueue")])
        assert env["RAYKUEUE_POD_NAMESPACE"] == ns
        kubeconfig = token_kubeconfig(api_stack, service_account_token(api, ns, "raykueue"),
                                      tmp_path / "sa.kubeconfig")
        server = RaykueueServer(api_stack, tmp_path, args=["--kubeconfig", str(kubeconfig)], env={
            "KUBECONFIG": str(kubeconfig),
            **{k: env[k] for k in KEPT_FROM_THE_DEPLOYMENT if k in env}})
        server.start()

        api.call("POST", FLAVORS, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                                   "metadata": {"name": flavor}})
        pod = rv.creatable_pod("head")
        pod["metadata"].pop("generateName", None)
        pod["metadata"].update(name="helm-head", namespace=ns)
        pod["metadata"].setdefault("labels", {})[c.QUEUE_LABEL] = "lq"
        pod["metadata"].setdefault("annotations", {})[c.STANDALONE_ANNOTATION] = "true"
        created = api.call("POST", f"/api/v1/namespaces/{ns}/pods", pod)
        assert rv.gates(created) == [c.GATE]
        wl = wait_for(lambda: (api.get(WORKLOADS.format(ns=ns))["items"] or [None])[0], timeout=60,
                      message=lambda: f"a Workload for the pod; log:\n{server.logs()}")
        _admit(api, wl, flavor)
        wait_for(lambda: not rv.gates(api.get(f"/api/v1/namespaces/{ns}/pods/helm-head")),
                 timeout=60, message=lambda: f"the gate lifted by the controller; log:\n{server.logs()}")
    finally:
        if server is not None:
            server.close()
        with contextlib.suppress(KubeError):
            api.delete(f"{FLAVORS}/{flavor}")
        for path in made:
            with contextlib.suppress(KubeError):
                api.delete(path)
