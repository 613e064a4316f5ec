"""As it ships, the second way: `helm install charts/raykueue` in a namespace of the user's
choosing (not raykueue-system), raykueue's own image on the real node.

testkit/node_install.py says how the release namespace keeps the pods on the real
node (the chart has no tolerations or nodeSelector values).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

import devstack
from devstack.node import kubelet as node
from testkit import node_install as inst
from testkit.e2e.controller import (  # noqa: F401 - fixtures
    RAYCLUSTERS,
    admin,
    describe,
    queue,
    raycluster,
    settled,
)
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.waiting import wait_for

NAMESPACE = "raykueue-helm"


@pytest.fixture(scope="module")
def installed(node_stack: devstack.Stack) -> Iterator[inst.Install]:
    try:
        done = inst.install_helm(node_stack, NAMESPACE)
        print(f"\n[node] helm install: 2 replicas Ready on {node.NODE_NAME} in "
              f"{done.seconds_to_ready:.1f}s ({done.image})", file=sys.stderr)
        yield done
    finally:
        inst.uninstall_helm(node_stack, NAMESPACE)
        node_stack.api.delete(f"/api/v1/namespaces/{NAMESPACE}")


def test_both_replicas_ready_on_the_real_node(node_stack, installed) -> None:
    pods = inst.deployment_pods(node_stack, NAMESPACE)
    assert len(pods) == 2
    assert {p["spec"]["nodeName"] for p in pods} == {node.NODE_NAME}
    lease = wait_for(lambda: (node_stack.api.get_or_none(
        f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/raykueue-controller")
        or {}).get("spec", {}).get("holderIdentity"), timeout=60, message="a Lease holder")
    assert lease.split("_", 1)[0] in {p["metadata"]["name"] for p in pods}


def test_an_opted_in_raycluster_is_admitted_pod_by_pod(
        node_stack, installed, admin, queue) -> None:  # noqa: F811
    errors_before = inst.webhook_errors(node_stack)
    ns = queue("8", "16Gi")
    admin.create(RAYCLUSTERS.path(ns), raycluster("helm-shipped", 1))
    wait_for(settled(admin, ns, "helm-shipped", 1, 0), timeout=120,
             message=describe(admin, ns, "helm-shipped"))
    assert inst.webhook_errors(node_stack) == errors_before


def test_uninstall_leaves_no_webhook_and_no_rbac(node_stack, installed) -> None:
    inst.uninstall_helm(node_stack, NAMESPACE)
    assert inst.raykueue_leftovers(node_stack) == []
