"""Figures from outside the processes measured: Prometheus text from Kueue, etcd and the
API server, and CPU seconds and peak RSS from /proc. Used by bench/cohort.py.

Pure parsing (`parse`, `total`, `quantile`) apart from the few functions that fetch.
"""

from __future__ import annotations

import math
import os
import re
import ssl
import urllib.request
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from raykueue.kube.rest import Rest

# name{labels} value; labels as a sorted tuple of (key, value) so samples can be keys.
Labels = tuple[tuple[str, str], ...]
Samples = dict[str, dict[Labels, float]]
_LINE = re.compile(r'^(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse(text: str, prefixes: tuple[str, ...] = ()) -> Samples:
    """Prometheus text exposition -> name -> labels -> value (only `prefixes` when given)."""
    out: Samples = defaultdict(dict)
    for line in text.splitlines():
        if not line or line[0] == "#" or (prefixes and not line.startswith(prefixes)):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        try:
            value = float(m["value"])
        except ValueError:
            continue
        labels = tuple(sorted(_LABEL.findall(m["labels"] or "")))
        out[m["name"]][labels] = value
    return dict(out)


def total(samples: Samples, metric: str, /, **match: str) -> float:
    """Sum of `metric` over the samples whose labels include `match` (any label, `name` too)."""
    return sum(v for labels, v in samples.get(metric, {}).items()
               if all(dict(labels).get(k) == want for k, want in match.items()))


def by_label(samples: Samples, name: str, key: str) -> dict[str, float]:
    found: dict[str, float] = defaultdict(float)
    for labels, v in samples.get(name, {}).items():
        found[dict(labels).get(key, "")] += v
    return dict(found)


def diff(after: Samples, before: Samples) -> Samples:
    """Counters and histogram buckets between two scrapes (gauges come out as their change)."""
    return {name: {labels: v - before.get(name, {}).get(labels, 0.0) for labels, v in series.items()}
            for name, series in after.items()}


def quantile(samples: Samples, histogram: str, q: float, /, **match: str) -> float | None:
    """histogram_quantile over every series of `histogram` (its _bucket samples summed by `le`),
    linear within a bucket as Prometheus does; None without observations."""
    buckets: dict[float, float] = defaultdict(float)
    for labels, v in samples.get(histogram + "_bucket", {}).items():
        d = dict(labels)
        if all(d.get(k) == want for k, want in match.items()):
            buckets[float(d["le"])] += v
    ordered = sorted(buckets.items())
    if not ordered or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in ordered:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            width = count - lower_count
            return lower_bound + (bound - lower_bound) * ((rank - lower_count) / width if width else 1)
        lower_bound, lower_count = bound, count
    return lower_bound


def mean(samples: Samples, histogram: str, /, **match: str) -> float | None:
    count = total(samples, histogram + "_count", **match)
    return total(samples, histogram + "_sum", **match) / count if count else None


# ---- fetching ------------------------------------------------------------------------

def fetch(url: str, token: str | None = None, timeout: float = 30) -> str:
    """GET over loopback; TLS unverified (Kueue's metrics certificate is self-signed)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(req, context=ctx, timeout=timeout) as r:
        return r.read().decode()


def metrics_token(rest: Rest, namespace: str = "kube-system", name: str = "bench-metrics") -> str:
    """A ServiceAccount token allowed GET /metrics: Kueue's metrics server authenticates each
    scrape with a TokenReview and authorizes it with a SubjectAccessReview."""
    objects: list[tuple[str, dict[str, Any]]] = [
        (f"/api/v1/namespaces/{namespace}/serviceaccounts",
         {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}),
        ("/apis/rbac.authorization.k8s.io/v1/clusterroles",
         {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
          "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}),
        ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
         {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
          "metadata": {"name": name},
          "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
          "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]}),
    ]
    for path, body in objects:
        try:
            rest.create(path, body)
        except Exception as e:  # already there from an earlier run on this stack
            if "AlreadyExists" not in str(e) and "409" not in str(e):
                raise
    review = rest.create(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                         {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                          "spec": {"expirationSeconds": 86400}})
    return review["status"]["token"]


@dataclass(frozen=True)
class ProcUse:
    cpu_s: float  # user + system, this process and its reaped children
    hwm_mib: float  # peak RSS since the process started (VmHWM)
    rss_mib: float = 0.0  # RSS now (VmRSS): what a checkpoint of the growth curve holds


def proc_use(pid: int) -> ProcUse:
    """CPU seconds, peak and current RSS of `pid` (zeros once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/status") as f:
            kib = {line.split(":")[0]: int(line.split()[1]) for line in f
                   if line.startswith(("VmHWM:", "VmRSS:"))}
    except OSError:
        return ProcUse(0.0, 0.0)
    tick = os.sysconf("SC_CLK_TCK")
    # Fields after the command: state is [0], utime [11], stime [12], cutime [13], cstime [14].
    cpu = sum(int(fields[i]) for i in (11, 12, 13, 14)) / tick
    return ProcUse(cpu, kib.get("VmHWM", 0) / 1024, kib.get("VmRSS", 0) / 1024)


def etcd_compact(client_url: str) -> None:
    """Compact etcd's history to now and defragment, through its gRPC gateway: the way
    that follows starts from a database holding only live objects (what it adds is its own)."""
    import base64
    import json

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(client_url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read() or b"{}")

    rev = post("/v3/kv/range", {"key": base64.b64encode(b"/").decode(), "limit": 1})["header"]["revision"]
    post("/v3/kv/compaction", {"revision": rev, "physical": True})
    post("/v3/maintenance/defragment", {})
