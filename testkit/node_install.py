"""raykueue installed on the node tier's stack as users install it.

kustomize: a copy of manifests/ with the image set as `kustomize edit set image`
sets it (an `images:` entry in kustomization.yaml), under an overlay that only
adds what this stack needs and a user's cluster would not: a toleration of the
real node's taint and a nodeSelector for it, so that raykueue's pods run on the
one node that runs containers and not on kwok's fake ones.

Helm: `helm install charts/raykueue` with the image in values. The chart has no
tolerations or nodeSelector values (and Helm 4's --post-renderer takes only
plugins), so the release namespace is made first, carrying the same two things
as namespace defaults (PodNodeSelector and PodTolerationRestriction, which the
stack's API server enables), and the chart is told not to make it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

import devstack
from devstack.node import kubelet as node
from testkit.waiting import wait_for

REPO_ROOT = Path(__file__).resolve().parents[1]
TOLERATION = {"key": node.NODE_TAINT["key"], "operator": "Equal",
              "value": node.NODE_TAINT["value"], "effect": node.NODE_TAINT["effect"]}
NODE_SELECTOR = {node.NODE_LABEL[0]: node.NODE_LABEL[1]}
WEBHOOK_CONFIGS = ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")


@dataclass
class Install:
    """What one scenario installed, for its checks and its uninstall."""

    namespace: str
    image: str
    seconds_to_ready: float
    how: str  # "kustomize" or "helm"
    workdir: Path | None = None  # kustomize: the tree `delete -k` takes


def split_image(ref: str) -> tuple[str, str]:
    name, _, tag = ref.rpartition(":")
    return name, tag


def kustomize_tree(workdir: Path, image: str) -> Path:
    """manifests/ with its image set, and the overlay over it; returns the overlay."""
    base = workdir / "manifests"
    shutil.copytree(REPO_ROOT / "manifests", base)
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    name, tag = split_image(image)
    # What `kustomize edit set image raykueue=<name>:<tag>` writes.
    kustomization["images"] = [{"name": "raykueue", "newName": name, "newTag": tag}]
    (base / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    overlay = workdir / "overlay"
    overlay.mkdir()
    patch = [
        {"op": "add", "path": "/spec/template/spec/tolerations", "value": [TOLERATION]},
        {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": NODE_SELECTOR},
    ]
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": ["../manifests"],
        "patches": [{"target": {"kind": "Deployment", "name": "raykueue"},
                     "patch": json.dumps(patch)}],
    }, sort_keys=False))
    return overlay


def run(argv: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr}{done.stdout}")
    return done


def kubectl(stack: devstack.Stack, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run([str(stack.binary("kubectl")), "--kubeconfig", str(stack.kubeconfig), *args],
               timeout=timeout)


def helm(stack: devstack.Stack, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run([str(stack.binary("helm")), "--kubeconfig", str(stack.kubeconfig), *args],
               timeout=timeout)


def deployment_pods(stack: devstack.Stack, ns: str) -> list[dict[str, Any]]:
    return stack.api.get(f"/api/v1/namespaces/{ns}/pods",
                         query={"labelSelector": "app.kubernetes.io/name=raykueue"})["items"]


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def wait_rolled_out(stack: devstack.Stack, ns: str, replicas: int = 2, timeout: float = 180) -> None:
    """The Deployment's pods all Ready and up to date, as `kubectl rollout status` says."""
    kubectl(stack, "-n", ns, "rollout", "status", "deploy/raykueue", f"--timeout={int(timeout)}s",
            timeout=timeout + 10)
    wait_for(lambda: len([p for p in deployment_pods(stack, ns) if ready(p)
                          and not p["metadata"].get("deletionTimestamp")]) == replicas,
             timeout=30, message=f"{replicas} Ready raykueue pods in {ns}")


def install_kustomize(stack: devstack.Stack, workdir: Path) -> Install:
    image = node.raykueue_image(stack)
    overlay = kustomize_tree(workdir, image)
    t0 = time.monotonic()
    kubectl(stack, "apply", "-k", str(overlay))
    wait_rolled_out(stack, "raykueue-system")
    return Install("raykueue-system", image, time.monotonic() - t0, "kustomize", workdir)


def uninstall_kustomize(stack: devstack.Stack, workdir: Path) -> None:
    kubectl(stack, "delete", "-k", str(workdir / "overlay"), "--ignore-not-found", "--wait=true",
            timeout=300)


def install_helm(stack: devstack.Stack, ns: str, release: str = "raykueue") -> Install:
    image = node.raykueue_image(stack)
    name, tag = split_image(image)
    stack.api.call("POST", "/api/v1/namespaces", {
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": ns, "labels": {
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest"},
            "annotations": {
                "scheduler.alpha.kubernetes.io/node-selector":
                    ",".join(f"{k}={v}" for k, v in NODE_SELECTOR.items()),
                "scheduler.alpha.kubernetes.io/defaultTolerations": json.dumps([TOLERATION])}}})
    t0 = time.monotonic()
    helm(stack, "install", release, str(REPO_ROOT / "charts" / "raykueue"), "--namespace", ns,
         "--set", f"image.repository={name}", "--set", f"image.tag={tag}",
         "--set", "createNamespace=false")
    wait_rolled_out(stack, ns)
    return Install(ns, image, time.monotonic() - t0, "helm")


def uninstall_helm(stack: devstack.Stack, ns: str, release: str = "raykueue") -> None:
    helm(stack, "uninstall", release, "--namespace", ns, "--ignore-not-found", "--wait")


def raykueue_leftovers(stack: devstack.Stack) -> list[str]:
    """Cluster-wide objects of raykueue's still there: webhook configurations, RBAC."""
    left = []
    for kind in WEBHOOK_CONFIGS:
        for item in stack.api.get(f"/apis/admissionregistration.k8s.io/v1/{kind}")["items"]:
            if "raykueue" in item["metadata"]["name"]:
                left.append(f"{kind}/{item['metadata']['name']}")
    for kind in ("clusterroles", "clusterrolebindings"):
        for item in stack.api.get(f"/apis/rbac.authorization.k8s.io/v1/{kind}")["items"]:
            if item["metadata"]["name"].startswith("raykueue"):
                left.append(f"{kind}/{item['metadata']['name']}")
    return left


def webhook_calls(stack: devstack.Stack, webhook: str) -> float:
    """The API server's count of calls to `webhook` (apiserver_admission_webhook_request_total)."""
    _, body = stack.api.request("GET", "/metrics")
    total = 0.0
    for line in body.decode().splitlines():
        if line.startswith("apiserver_admission_webhook_request_total{") and f'name="{webhook}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def webhook_errors(stack: devstack.Stack) -> float:
    """Calls to any raykueue webhook that failed (apiserver_admission_webhook_rejection_count)."""
    _, body = stack.api.request("GET", "/metrics")
    total = 0.0
    for line in body.decode().splitlines():
        if (line.startswith("apiserver_admission_webhook_rejection_count{")
                and "raykueue" in line and 'error_type="calling_webhook_error"' in line):
            total += float(line.rsplit(" ", 1)[1])
    return total
