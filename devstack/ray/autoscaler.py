"""The unmodified KubeRay autoscaler (Ray's, v2) as a local process against the stack.

In a cluster it is the head pod's `autoscaler` sidecar, talking to the API
server as the head group's ServiceAccount, which KubeRay binds to a Role of
its own (pods get/list/watch/patch, rayclusters get/patch). Here it gets a
client certificate whose user name is that ServiceAccount's, so the very Role
KubeRay made is all it may do; not the stack's admin.

The node provider reads the API server's address and its credentials from the
environment at import time (ray/autoscaler/_private/kuberay/node_provider.py),
its metrics port from AUTOSCALER_METRIC_PORT (so that two run side by side).
The rest of its env is the sidecar's, as KubeRay wrote it into the head pod
(spec.autoscalerOptions.env included).
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

from ..controlplane import pki
from .procs import python

AUTOSCALER_CONTAINER = "autoscaler"
_LABEL_REF = re.compile(r"metadata\.labels\['([^']+)'\]")


def service_account_user(namespace: str, name: str) -> str:
    """The user name the API server gives a ServiceAccount (RBAC matches on it)."""
    return f"system:serviceaccount:{namespace}:{name}"


def credentials(ca: pki.Pair, out_dir: Path, namespace: str, service_account: str) -> pki.Pair:
    return pki.issue(ca, pki.Pair(out_dir / "autoscaler.crt", out_dir / "autoscaler.key"),
                     common_name=service_account_user(namespace, service_account), client=True)


def container_env(pod: dict, container: str = AUTOSCALER_CONTAINER) -> dict[str, str]:
    """A container's env as the kubelet would give it: values, and the pod's own
    metadata for fieldRefs (anything else is not for a local process)."""
    meta = pod["metadata"]
    spec = next(c for c in pod["spec"]["containers"] if c["name"] == container)
    env: dict[str, str] = {}
    for var in spec.get("env") or []:
        if "value" in var:
            env[var["name"]] = var["value"]
            continue
        path = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
        label = _LABEL_REF.fullmatch(path)
        if path in ("metadata.name", "metadata.namespace"):
            env[var["name"]] = meta[path.split(".")[1]]
        elif label:
            env[var["name"]] = (meta.get("labels") or {}).get(label.group(1), "")
    return env


def argv(cluster: str, namespace: str, gcs_address: str) -> list[str]:
    return [python(), "-m", "ray.scripts.scripts", "kuberay-autoscaler", "--cluster-name", cluster,
            "--cluster-namespace", namespace, "--gcs-address", gcs_address]


def env(head_pod: dict, server: str, ca_file: Path, creds: pki.Pair, metric_port: int) -> dict[str, str]:
    url = urlsplit(server)
    return {
        **container_env(head_pod),
        "KUBERNETES_SERVICE_HOST": str(url.hostname),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(url.port),
        "RAY_KUBERAY_CLIENT_CERT_PATH": str(creds.cert),
        "RAY_KUBERAY_CLIENT_KEY_PATH": str(creds.key),
        "RAY_KUBERAY_CA_CERT_PATH": str(ca_file),
        "AUTOSCALER_METRIC_PORT": str(metric_port),
    }
