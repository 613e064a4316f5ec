"""The namespace a one-shot command acts in when not told: the one kubectl would use.

Same sources, in the same order, as `kube.client` finds the cluster: --kubeconfig,
KUBECONFIG, the in-cluster service account, ~/.kube/config. A context without a
namespace, or no configuration at all, means "default", as for kubectl.
"""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes.config import list_kube_config_contexts
from kubernetes.config.config_exception import ConfigException

from raykueue.kube.client import DEFAULT_KUBECONFIG

IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def context_namespace(kubeconfig: str | None, in_cluster_file: Path = IN_CLUSTER_NAMESPACE) -> str:
    env = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep)
           if p and os.path.exists(os.path.expanduser(p))]
    if kubeconfig:
        return _from_kubeconfig(kubeconfig)
    if env:
        return _from_kubeconfig(os.pathsep.join(env))
    if os.environ.get("KUBERNETES_SERVICE_HOST") and in_cluster_file.exists():
        return in_cluster_file.read_text().strip() or "default"
    default = os.path.expanduser(DEFAULT_KUBECONFIG)
    return _from_kubeconfig(default) if os.path.exists(default) else "default"


def _from_kubeconfig(path: str) -> str:
    try:
        _, active = list_kube_config_contexts(config_file=path)
    except (ConfigException, OSError):
        # The client load that follows says what is wrong with the file.
        return "default"
    namespace = ((active or {}).get("context") or {}).get("namespace")
    return namespace if isinstance(namespace, str) and namespace else "default"
