"""`helm uninstall` alone leaves nothing gated for good (issue 28, item 6), on the real node.

Installed as testkit/node_install.py installs the README's Helm way (raykueue's own
image on the real kubelet); an opted-in RayCluster with one worker gated for want
of quota; then `helm uninstall` and nothing else. Its pre-delete hook (the Job
`raykueue uninstall --yes --handback`, charts/raykueue/templates/uninstall-hook.yaml)
runs while raykueue still runs: the cluster is suspended and handed to Kueue, its
pods go, and no pod is left Pending or gated; the hook's account and role go
with the rest of the release.
"""

from __future__ import annotations

import sys
import time

import pytest

import devstack
from raykueue.core import contract as c
from testkit import node_install as inst
from testkit.e2e.controller import (  # noqa: F401 - fixtures
    RAYCLUSTERS,
    admin,
    describe,
    queue,
    raycluster,
    settled,
)
from testkit.quota_invariants import gated_by_raykueue
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.waiting import wait_for

NAMESPACE = "raykueue-helm-out"


# Install (the image into the release), a cluster settled, the uninstall with its hook.
@pytest.mark.timeout(900)
def test_helm_uninstall_alone_leaves_no_pod_pending_or_gated(
        node_stack: devstack.Stack, admin, queue) -> None:  # noqa: F811
    installed = False
    try:
        done = inst.install_helm(node_stack, NAMESPACE)
        installed = True
        print(f"\n[node] helm install: Ready in {done.seconds_to_ready:.1f}s ({done.image})",
              file=sys.stderr)
        ns = queue("2", "16Gi")  # the head and one worker; the second worker waits, gated
        admin.create(RAYCLUSTERS.path(ns), raycluster("left", 2))
        wait_for(settled(admin, ns, "left", 1, 1), timeout=180, message=describe(admin, ns, "left"))

        started = time.monotonic()
        try:
            inst.uninstall_helm(node_stack, NAMESPACE)  # the hook runs inside, Helm waits for it
        except BaseException:
            print(hook_state(node_stack), file=sys.stderr)
            raise
        installed = False
        took = time.monotonic() - started
        print(f"[node] helm uninstall (hook included): {took:.1f}s", file=sys.stderr)

        def pods() -> list[dict]:
            return admin.get(f"/api/v1/namespaces/{ns}/pods")["items"]

        # Suspended: KubeRay deleted its pods, none comes back; nothing is gated.
        wait_for(lambda: not pods(), timeout=120,
                 message=lambda: f"the cluster's pods to go: {[p['metadata']['name'] for p in pods()]}")
        assert not any(gated_by_raykueue(p) or p["status"].get("phase") == "Pending" for p in pods())
        cluster = admin.get(RAYCLUSTERS.path(ns, "left"))
        meta = cluster["metadata"]
        assert meta["labels"][c.QUEUE_LABEL] == "team-a"  # Kueue's now
        assert c.STANDALONE_ANNOTATION not in (meta.get("annotations") or {})
        assert cluster["spec"]["suspend"] is True  # until Kueue admits it whole
        assert inst.raykueue_leftovers(node_stack) == []
    finally:
        if installed:
            inst.uninstall_helm(node_stack, NAMESPACE)
        if node_stack.api.get_or_none(f"/api/v1/namespaces/{NAMESPACE}") is not None:
            node_stack.api.delete(f"/api/v1/namespaces/{NAMESPACE}")


def hook_state(stack: devstack.Stack) -> str:
    """The hook Job's status and its pods' phases and logs, for a failure's report."""
    api = stack.api
    job = api.get_or_none(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/raykueue-uninstall")
    lines = [f"hook Job status: {(job or {}).get('status')}"]
    pods = api.get(f"/api/v1/namespaces/{NAMESPACE}/pods",
                   query={"labelSelector": "app.kubernetes.io/component=uninstall"})["items"]
    for pod in pods:
        name = pod["metadata"]["name"]
        lines.append(f"pod {name}: {pod['status'].get('phase')} {pod['status'].get('conditions')}")
        try:
            _, body = api.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/log")
            lines.append(body.decode(errors="replace")[-4000:])
        except Exception as exc:  # a report, whatever the log says
            lines.append(f"(no log: {exc})")
    return "\n".join(lines)

