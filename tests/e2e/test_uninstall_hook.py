"""`helm uninstall`'s pre-delete hook, its command as the Job runs it (issue 28, item 6).

A plain `helm uninstall` used to leave every gated pod Pending for good. The
chart now runs `raykueue uninstall --yes --handback` in a Job before Helm deletes
anything (charts/raykueue/templates/uninstall-hook.yaml). Here, on the real
stack (Kueue as shipped, KubeRay, kwok), the Job's command is run exactly as the
chart renders it (arguments, the hook's own ServiceAccount and ClusterRole, a
token of that account), with raykueue still running: an autoscaled opted-in
cluster with a worker gated for want of quota is handed to Kueue with no 403,
nothing is left gated, Kueue admits it whole and runs it, and the autoscaler's
allocate timeout raykueue raised is gone from it. (tests/node/test_uninstall_helm.py
runs the real `helm uninstall` with the image on the node tier.)
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

import devstack
from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube.rest import ApiError, Rest
from raykueue.webhooks.autoscaler_env import ALLOCATE_TIMEOUT_ENV, INJECTED_ANNOTATION
from testkit.accounts import service_account_token, token_kubeconfig
from testkit.e2e.controller import CQS, admin, queue  # noqa: F401 - fixtures
from testkit.e2e.uninstall import alone_on_the_stack, handed_to_kueue, raykueue_webhooks, settled_ours
from testkit.outage import (  # noqa: F401 - fixtures
    Raykueue,
    kueue_workload,
    ray_object,
    ray_pods,
    raykueue,
    raykueue_workloads,
    runs,
    untouched_by_raykueue,
)
from testkit.quota_invariants import RAY, QuotaInvariants, gated_by_raykueue

REPO_ROOT = Path(__file__).resolve().parents[2]
HOOK_NAMESPACE = "default"  # the release namespace, as far as the hook's objects go
HOOK = "raykueue-uninstall"
RBAC = "/apis/rbac.authorization.k8s.io/v1"


def rendered_hook(stack: devstack.Stack) -> dict[str, dict[str, Any]]:
    """The chart's hook objects, by kind, as `helm template` renders them."""
    out = subprocess.run([str(stack.binary("helm")), "template", "raykueue",
                          str(REPO_ROOT / "charts" / "raykueue"), "--namespace", HOOK_NAMESPACE,
                          "--show-only", "templates/uninstall-hook.yaml"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    for doc in docs:
        assert doc["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete", doc["kind"]
    return {d["kind"]: d for d in docs}


def install_account(admin: Rest, hook: dict[str, dict[str, Any]]) -> None:  # noqa: F811
    admin.create(f"/api/v1/namespaces/{HOOK_NAMESPACE}/serviceaccounts", hook["ServiceAccount"])
    admin.create(f"{RBAC}/clusterroles", hook["ClusterRole"])
    admin.create(f"{RBAC}/clusterrolebindings", hook["ClusterRoleBinding"])


def remove_account(admin: Rest) -> None:  # noqa: F811
    for path in (f"{RBAC}/clusterrolebindings/{HOOK}", f"{RBAC}/clusterroles/{HOOK}",
                 f"/api/v1/namespaces/{HOOK_NAMESPACE}/serviceaccounts/{HOOK}"):
        with contextlib.suppress(ApiError):
            admin.delete(path)


def job_command(hook: dict[str, dict[str, Any]]) -> list[str]:
    pod = hook["Job"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["raykueue"] and pod["serviceAccountName"] == HOOK
    return [str(a) for a in container["args"]]


def allocate_timeout(obj: dict[str, Any]) -> list[dict[str, Any]]:
    env = ((obj.get("spec") or {}).get("autoscalerOptions") or {}).get("env") or []
    return [e for e in env if e.get("name") == ALLOCATE_TIMEOUT_ENV]


def test_the_hooks_command_as_its_account_leaves_nothing_gated_and_hands_back(
        admin, raykueue: Raykueue, e2e_stack: devstack.Stack, queue, tmp_path: Path) -> None:  # noqa: F811
    hook = rendered_hook(e2e_stack)
    args = job_command(hook)
    assert args[:3] == ["uninstall", "--yes", "--handback"], args
    # head 1 + its autoscaler sidecar 0.1 + one worker: the second worker waits, gated.
    ns = queue(cpu="2100m", memory="64Gi")
    cq = f"e2e-{ns}"
    alone_on_the_stack(admin, ns)
    install_account(admin, hook)
    try:
        with QuotaInvariants(admin, [ns], quota_namespaces=[ns], cluster_queues=[cq]) as inv:
            admin.create(RAY[c.RAYCLUSTER_KIND].path(ns), ray_object(
                c.RAYCLUSTER_KIND, "auto", 2, opted_in=True, queue="team-a", cpu="1", autoscaling=True))
            inv.wait(lambda: settled_ours(admin, ns, "auto", 1, 1), timeout=120,
                     message="auto: head and one worker Running, one gated for quota")
            before = admin.get(RAY[c.RAYCLUSTER_KIND].path(ns, "auto"))
            assert allocate_timeout(before) == [{"name": ALLOCATE_TIMEOUT_ENV, "value": "86400"}]
            assert before["metadata"]["annotations"][INJECTED_ANNOTATION] == "86400"

            token = service_account_token(e2e_stack.api, HOOK_NAMESPACE, HOOK)
            kubeconfig = token_kubeconfig(e2e_stack, token, tmp_path / "hook.kubeconfig")
            started = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "raykueue.app.cli", *args,
                                   "--kubeconfig", str(kubeconfig)],
                                  capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
            print(f"\n$ raykueue {' '.join(args)}  (exit {done.returncode}, "
                  f"{time.monotonic() - started:.1f}s)\n{done.stdout}{done.stderr}")
            assert done.returncode == 0, done.stdout + done.stderr
            assert "forbidden" not in (done.stdout + done.stderr).lower()
            assert raykueue_webhooks(admin) == []
            assert raykueue_workloads(admin, ns) == []
            # Nothing Pending, nothing gated: the cluster is Kueue's, suspended until
            # Kueue admits it whole (3.1 cpus, more than the 2.1 it had pod by pod).
            assert ray_pods(admin, ns) == []
            after = handed_to_kueue(admin, ns, c.RAYCLUSTER_KIND, "auto", "team-a")
            assert allocate_timeout(after) == []  # Ray's own timeout again
            assert after["spec"]["suspend"] is True
            admin.json_patch(CQS.path(None, cq), [{
                "op": "replace", "path": "/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota",
                "value": "3100m"}])
            inv.wait(lambda: (x := kueue_workload(admin, ns, c.RAYCLUSTER_KIND, "auto"))
                     and w.is_admitted(x), timeout=120, message="Kueue to admit auto whole")
            pods = inv.wait(runs(admin, ns, c.RAYCLUSTER_KIND, "auto", 2), timeout=180,
                            message="auto Running under Kueue")
            assert all(untouched_by_raykueue(p) for p in pods)
            assert not any(gated_by_raykueue(p) for p in ray_pods(admin, ns))
            inv.sweep()
        inv.raise_if_broken()
    finally:
        remove_account(admin)
