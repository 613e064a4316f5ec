"""The API objects every stack starts with: CRDs, sample Kueue objects, kwok nodes."""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
from pathlib import Path

import yaml

from ..config import StackConfig
from ..probes import condition
from ..procs import StackError
from .kubeapi import KubeApi, object_path

KUEUE_NAMESPACE = "kueue-system"
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")


def crd_files(config: StackConfig) -> list[Path]:
    files = []
    for sub in ("kueue", "kuberay"):
        found = sorted((config.crd_dir / sub).glob("*.yaml"))
        if not found:
            raise StackError(f"no CRDs under {config.crd_dir / sub}; run controlplane/build.sh")
        files += found
    return files


def crds_digest(files: list[Path]) -> str:
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.read_bytes())
    return digest.hexdigest()


def install_crds(api: KubeApi, files: list[Path], timeout: float) -> list[str]:
    """Server-side apply every CRD file; returns the CRD names.

    `timeout` is per request: on a loaded machine a fresh API server can take
    longer than KubeApi's default 30 s over the largest CRDs.
    """
    # The files go to the API server as they are (apply-patch+yaml takes YAML):
    # parsing 5 MB of YAML here would cost more than the applies. Only the
    # head of each file (apiVersion, kind, metadata) is read, for the URL.
    docs = []
    for f in files:
        raw = f.read_bytes()
        if raw.count(b"\n---") > 0 and raw.lstrip().startswith(b"---"):
            raw = raw.lstrip()[3:]
        if b"\n---\n" in raw:
            raise StackError(f"{f}: expected one CRD per file")
        head = raw.split(b"\nspec:", 1)[0]
        docs.append((yaml.safe_load(head), raw))

    def apply(item: tuple[dict, bytes]) -> str:
        meta, raw = item
        api.call("PATCH", object_path(meta), raw,
                 query={"fieldManager": "raykueue-devstack", "force": "true"},
                 content_type="application/apply-patch+yaml", timeout=timeout)
        return meta["metadata"]["name"]

    with cf.ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(apply, docs))


def crds_established(api: KubeApi, names: list[str]) -> tuple[bool, str]:
    pending = []
    for n in names:
        crd = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{n}")
        if condition(crd, "Established") != "True":
            pending.append(n)
    return not pending, f"not Established: {pending}"


def base_objects(config: StackConfig) -> list[dict]:
    s = config.samples
    objs: list[dict] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": s.local_queue_namespace}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": s.flavor}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
         "metadata": {"name": s.cluster_queue},
         "spec": {
             "namespaceSelector": {},
             "resourceGroups": [{
                 "coveredResources": list(s.quota),
                 "flavors": [{"name": s.flavor, "resources": [
                     {"name": r, "nominalQuota": q} for r, q in s.quota.items()]}],
             }],
         }},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": s.local_queue, "namespace": s.local_queue_namespace},
         "spec": {"clusterQueue": s.cluster_queue}},
    ]
    for name, value in s.priority_classes.items():
        objs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                     "metadata": {"name": name}, "value": value,
                     "description": f"raykueue devstack sample ({name})"})
    return objs


def node_objects(config: StackConfig) -> list[dict]:
    n = config.nodes
    key, value = KWOK_NODE_ANNOTATION
    return [{
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": f"{n.prefix}{i}",
            "annotations": {key: value, "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"type": "kwok", "kubernetes.io/hostname": f"{n.prefix}{i}",
                       "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                       "kubernetes.io/role": "agent"},
        },
        "spec": {},
        "status": {"capacity": dict(n.capacity), "allocatable": dict(n.capacity),
                   "phase": "Running"},
    } for i in range(n.count)]


def apply_objects(api: KubeApi, objs: list[dict]) -> None:
    for obj in objs:
        api.apply(object_path(obj), obj)
        if obj["kind"] == "Node":
            # status is a subresource: capacity must be there before the scheduler looks
            api.apply(object_path(obj) + "/status", {
                "apiVersion": obj["apiVersion"], "kind": obj["kind"],
                "metadata": {"name": obj["metadata"]["name"]}, "status": obj["status"]})
