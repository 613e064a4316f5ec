"""Admission and certificate metrics (Prometheus, default registry).

The controller defines its own in controller/metrics.py; /metrics serves the
default registry, so both appear on one page.
"""

from __future__ import annotations

import platform
from bisect import bisect_left
from collections.abc import Iterator
from importlib import metadata
from itertools import accumulate

from prometheus_client import REGISTRY, Counter, Gauge
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from raykueue.core import contract as c

# Decisions take tens of microseconds; the API server's timeout is seconds.
ADMISSION_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 1.0)


class AdmissionStats:
    """The admission endpoints' counts and latencies, as plain numbers read at scrape time.

    The event loop, the only writer, adds to dicts and lists; /metrics (another thread)
    copies them whole, each copy one step under the GIL. Counter.inc and
    Histogram.observe each take a lock and walk Python code per call: three of them
    per review cost more than the rest of the accounting. The page is the same
    families as prometheus_client's Counter and Histogram would give, less `_created`.
    """

    def __init__(self, buckets: tuple[float, ...] = ADMISSION_BUCKETS) -> None:
        self.bounds = buckets
        self.requests: dict[tuple[str, str, str], int] = {}
        self.bad: dict[str, int] = {}
        # Per webhook: a count per bucket (the last one +Inf, not cumulative) and the sum.
        self.latency: dict[str, tuple[list[int], list[float]]] = {}

    def record(self, webhook: str, decision: str, role: str, seconds: float) -> None:
        """One answered review: its count and its latency (one call: this runs per review)."""
        key = (webhook, decision, role)
        self.requests[key] = self.requests.get(key, 0) + 1
        found = self.latency.get(webhook)
        if found is None:
            found = self.latency[webhook] = ([0] * (len(self.bounds) + 1), [0.0])
        found[0][bisect_left(self.bounds, seconds)] += 1
        found[1][0] += seconds

    def count_bad(self, webhook: str) -> None:
        self.bad[webhook] = self.bad.get(webhook, 0) + 1

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "raykueue_admission_requests",
            "Admission requests answered, by webhook, decision and Ray role.",
            labels=["webhook", "decision", "role"])
        for labels, value in list(self.requests.items()):
            requests.add_metric(labels, value)
        yield requests
        latency = HistogramMetricFamily(
            "raykueue_admission_duration_seconds",
            "Time from a request's body being read to its answer being encoded.",
            labels=["webhook"])
        for webhook, (counts, total) in list(self.latency.items()):
            cumulative = list(accumulate(list(counts)))
            latency.add_metric([webhook], list(zip(
                [*map(floatToGoString, self.bounds), "+Inf"], cumulative, strict=True)), total[0])
        yield latency
        bad = CounterMetricFamily(
            "raykueue_admission_bad_requests",
            "Requests answered 400 because the body was not a usable AdmissionReview.",
            labels=["webhook"])
        for webhook, value in list(self.bad.items()):
            bad.add_metric([webhook], value)
        yield bad


ADMISSIONS = AdmissionStats()
REGISTRY.register(ADMISSIONS)
# Off the common path (a cache miss, in a worker thread), so prometheus_client's own
# Counter: its lock is what several threads need.
OWNER_READS = Counter(
    "raykueue_admission_owner_reads",
    "Ray owners of an opted-in pod read from the API server during its review because "
    "raykueue's cache lacked them, by kind and result (found, not_found, error).",
    ["kind", "result"],
)
for _kind in (c.RAYCLUSTER_KIND, c.RAYJOB_KIND, c.RAYSERVICE_KIND):
    for _result in ("found", "not_found", "error"):
        OWNER_READS.labels(_kind, _result)  # on the page at 0 before the first read
CERT_EXPIRY = Gauge(
    "raykueue_certificate_expiry_timestamp_seconds",
    "Unix time at which the serving certificate expires.",
)
CERT_RELOADS = Counter(
    "raykueue_certificate_reloads",
    "Serving certificate reloads from disk.",
)
LEADER = Gauge(
    "raykueue_leader",
    "1 while this replica holds the controller Lease (or runs without leader election), else 0.",
)
TLS_HANDSHAKES = Counter(
    "raykueue_tls_handshakes",
    "TLS handshakes begun (ClientHellos received). The API server reuses an idle "
    "connection for 90 s; many per thousand reviews mean connections are not kept alive.",
)


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:  # run from a source tree without installing
        return "unknown"


BUILD_INFO = Gauge(
    "raykueue_build_info",
    "Always 1; its labels say which raykueue, Python and Kubernetes client a replica runs, "
    "so a dashboard can tell replicas of two versions apart during a rollout.",
    ["version", "python", "kubernetes_client"],
)
BUILD_INFO.labels(version=_version("raykueue"), python=platform.python_version(),
                  kubernetes_client=_version("kubernetes")).set(1)
