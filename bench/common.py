"""What the benches share: the API server's request counters, the bench stack, Kueue
objects, a raykueue server serving only the bench's namespaces, and process memory.

Imported by bench/controller.py, bench/compare.py and bench/scaleup.py, which are
run as scripts from the repository root (`python bench/compare.py`).
"""

from __future__ import annotations

import os
import re
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import devstack
from bench.kueue_pods import kueue_pod_integration
from raykueue.core import contract as c
from raykueue.kube.resources import crd
from raykueue.kube.rest import ApiError, Rest
from testkit.reads import get_or_none
from testkit.reviews import creatable_pod
from testkit.servers import RaykueueServer
from testkit.waiting import wait_for

ROOT = Path(__file__).resolve().parent.parent

KUEUE = "kueue.x-k8s.io"
WORKLOADS = crd(KUEUE, "v1beta2", "workloads")
CQS = crd(KUEUE, "v1beta2", "clusterqueues", namespaced=False)
LQS = crd(KUEUE, "v1beta2", "localqueues")
FLAVORS = crd(KUEUE, "v1beta2", "resourceflavors", namespaced=False)
RAYCLUSTERS = crd("ray.io", "v1", "rayclusters")

# Namespaces carry SYSTEM_LABEL=<system>: Kueue's pod integration and its webhooks
# see only "kueue" ones, raykueue's webhooks only "raykueue" ones.
SYSTEM_LABEL = "bench.raykueue.io/system"
KUEUE_NAMESPACES = {"matchLabels": {SYSTEM_LABEL: "kueue"}}
RAYKUEUE_NAMESPACES = {"matchLabels": {SYSTEM_LABEL: "raykueue"}}
QUEUE = "bench"
ADMIN = "raykueue-admin"  # CN of devstack's admin certificate, which the controller runs as
# Small requests so that thousands of pods fit the bench nodes and quota.
POD_RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"},
                 "limits": {"cpu": "100m", "memory": "128Mi"}}
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION", "CREATE",
                         "UPDATE"})
# Writes no pod lifecycle causes: kwok's node heartbeats, leader leases, authn/z reviews.
BACKGROUND = frozenset({"leases", "nodes", "namespaces", "tokenreviews", "subjectaccessreviews",
                        "selfsubjectaccessreviews", "serviceaccounts", "configmaps"})

METRIC = re.compile(r'^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>[\d.e+]+)$')
Key = tuple[str, str, str]


def request_totals(rest: Rest) -> Counter[Key]:
    """(verb, resource, subresource) -> requests, from the API server's /metrics."""
    text = rest.request("GET", "/metrics")
    totals: Counter[Key] = Counter()
    for line in text.splitlines():
        match = METRIC.match(line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
        if labels.get("dry_run"):
            continue
        key = (labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""))
        totals[key] += int(float(match["value"]))
    return totals


def lifecycle_writes(before: Counter[Key], after: Counter[Key]) -> Counter[Key]:
    """Writes between two scrapes, without reads and background writes."""
    return Counter({k: after[k] - before[k] for k in after
                    if after[k] > before[k] and k[0] in WRITE_VERBS and k[1] not in BACKGROUND})


def label(key: Key) -> str:
    verb, resource, sub = key
    return f"{verb} {resource}{'/' + sub if sub else ''}"


def percentile(values: Iterable[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def spread(values: list[float]) -> str:
    """min..max and the relative spread of per-round figures (how noisy the rounds were)."""
    lo, hi, mid = min(values), max(values), statistics.median(values)
    return f"{lo:.2f}..{hi:.2f} (±{(hi - lo) / 2 / mid:.0%} of the median)" if mid else "n/a"


# ---- the stack -----------------------------------------------------------------------

def bench_config(nodes: int = 10, pods_per_node: int = 600) -> devstack.StackConfig:
    """An e2e stack with room for thousands of small pods on kwok nodes.

    Kueue runs as shipped (its pod integration on in every namespace but its
    own and kube-system) unless RAYKUEUE_KUEUE=minimal, where its pod integration
    is turned on for "kueue" namespaces only (the figures before Kueue as shipped).
    """
    config = devstack.StackConfig()
    if config.kueue_mode == "minimal":
        config.kueue_config = kueue_pod_integration(KUEUE_NAMESPACES)
    if not os.environ.get("RAYKUEUE_STACK_DIR"):
        config.stack_dir = Path("/tmp/stack-bench")
    config.nodes.count = nodes
    config.nodes.capacity = {"cpu": str(pods_per_node), "memory": f"{pods_per_node}Gi",
                             "nvidia.com/gpu": "0", "pods": str(pods_per_node)}
    config.ready_timeout = 300
    return config


def make_queue(rest: Rest, name: str, cpu: str, memory: str) -> None:
    """A ResourceFlavor and ClusterQueue `name` for every namespace (LocalQueues: add_namespace)."""
    for path, body in (
        (FLAVORS.path(), {"apiVersion": FLAVORS.api_version, "kind": "ResourceFlavor",
                          "metadata": {"name": name}}),
        (CQS.path(), {"apiVersion": CQS.api_version, "kind": "ClusterQueue", "metadata": {"name": name},
                      "spec": {"namespaceSelector": {}, "resourceGroups": [{
                          "coveredResources": ["cpu", "memory"],
                          "flavors": [{"name": name, "resources": [
                              {"name": "cpu", "nominalQuota": cpu},
                              {"name": "memory", "nominalQuota": memory}]}]}]}}),
    ):
        try:
            rest.create(path, body)
        except ApiError as e:
            if not e.is_already_exists:
                raise
    wait_for(lambda: any(cond["type"] == "Active" and cond["status"] == "True"
                         for cond in (rest.get(CQS.path(None, name)).get("status") or {})
                         .get("conditions", [])),
             timeout=120, message=f"ClusterQueue {name} Active")


def add_namespace(rest: Rest, prefix: str, system: str | None, cluster_queue: str) -> str:
    """A namespace (labelled for `system`), its LocalQueue QUEUE and default ServiceAccount."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    labels = {SYSTEM_LABEL: system} if system else {}
    rest.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": name, "labels": labels}})
    rest.create(LQS.path(name), {"apiVersion": LQS.api_version, "kind": "LocalQueue",
                                 "metadata": {"name": QUEUE, "namespace": name},
                                 "spec": {"clusterQueue": cluster_queue}})
    wait_for(lambda: get_or_none(rest, f"/api/v1/namespaces/{name}/serviceaccounts/default"),
             timeout=60, message=f"ServiceAccount {name}/default")
    return name


def worker_pod(namespace: str, opt_in: bool) -> dict[str, Any]:
    """The KubeRay worker pod from testkit/fixtures (no owner), small requests, queue label;
    `opt_in` adds raykueue's standalone annotation on the pod."""
    pod = creatable_pod("worker")
    meta = pod["metadata"]
    meta["namespace"] = namespace
    meta["labels"][c.QUEUE_LABEL] = QUEUE
    if opt_in:
        meta.setdefault("annotations", {})[c.STANDALONE_ANNOTATION] = "true"
    for container in pod["spec"]["containers"]:
        container["resources"] = POD_RESOURCES
    for container in pod["spec"].get("initContainers", []):
        container["resources"] = POD_RESOURCES
    # The fixture asks for a GPU node's shared memory; kwok nodes have no GPU.
    pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if v["name"] != "shared-mem"]
    for container in pod["spec"]["containers"]:
        container["volumeMounts"] = [m for m in container.get("volumeMounts", [])
                                     if m["name"] != "shared-mem"]
    return pod


def gates(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


# ---- raykueue ------------------------------------------------------------------------

def start_raykueue(stack: devstack.Stack, workdir: Path, probe_namespace: str,
                   env: dict[str, str] | None = None) -> RaykueueServer:
    """`raykueue serve` (webhooks + controller, no leader election) whose webhooks the API
    server calls for RAYKUEUE_NAMESPACES only; returns once a dry-run create is gated."""
    server = RaykueueServer(stack, workdir, register=False,
                            args=["--controller-identity", ADMIN,
                                  "--controller-identity", c.DEFAULT_CONTROLLER_IDENTITY],
                            env={"RAYKUEUE_LEADER_ELECTION": "false", **(env or {})},
                            ready_timeout=180)
    server.start()
    devstack.register_webhooks(stack.kubeconfig, server.url, server.ca_pem,
                               namespace_selector=RAYKUEUE_NAMESPACES)
    wait_for(lambda: c.GATE in dry_run_gates(stack, probe_namespace, opt_in=True), timeout=60,
             message=f"the API server to call raykueue at {server.url}")
    return server


def dry_run_pod(stack: devstack.Stack, namespace: str, opt_in: bool) -> dict[str, Any]:
    """The bench pod as the API server would store it (every webhook called, nothing kept)."""
    pod = worker_pod(namespace, opt_in)
    return stack.api.call("POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", pod)


def dry_run_gates(stack: devstack.Stack, namespace: str, opt_in: bool) -> list[str]:
    return gates(dry_run_pod(stack, namespace, opt_in))


# ---- process memory ------------------------------------------------------------------

def proc_status_kib(pid: int, field: str) -> int:
    """VmHWM (peak RSS) or VmRSS of a process, in KiB (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def elapsed(t0: float) -> float:
    return time.monotonic() - t0


def raykueue_writes(server: RaykueueServer) -> Counter[str]:
    """raykueue's own count of the writes its controller sent, from its /metrics."""
    import ssl
    import urllib.request

    ctx = ssl.create_default_context(cafile=str(server.ca_file))
    with urllib.request.urlopen(f"{server.url}/metrics", context=ctx, timeout=10) as r:
        text = r.read().decode()
    found: Counter[str] = Counter()
    for line in text.splitlines():
        if line.startswith("raykueue_api_writes_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            found[f"{labels.get('verb', '')} {labels.get('resource', '')}"] += int(float(line.split()[-1]))
    return found


def events_by_source(rest: Rest, namespace: str) -> Counter[tuple[str, str]]:
    """(component that reported it, reason) -> Events in the namespace, counting repeats."""
    found: Counter[tuple[str, str]] = Counter()
    for ev in rest.get(f"/api/v1/namespaces/{namespace}/events")["items"]:
        source = ev.get("reportingComponent") or (ev.get("source") or {}).get("component") or "?"
        found[(source, ev.get("reason", "?"))] += max(1, ev.get("count") or 1)
    return found
