"""Admission and certificate metrics (Prometheus, default registry).

The controller defines its own in controller/metrics.py; /metrics serves the
default registry, so both appear on one page.
"""

from __future__ import annotations

import platform
from importlib import metadata

from prometheus_client import Counter, Gauge, Histogram

ADMISSION_REQUESTS = Counter(
    "raykueue_admission_requests",
    "Admission requests answered, by webhook, decision and Ray role.",
    ["webhook", "decision", "role"],
)
ADMISSION_LATENCY = Histogram(
    "raykueue_admission_duration_seconds",
    "Time from a request's body being read to its answer being encoded.",
    ["webhook"],
    # Decisions take tens of microseconds; the API server's timeout is seconds.
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 1.0),
)
BAD_REQUESTS = Counter(
    "raykueue_admission_bad_requests",
    "Requests answered 400 because the body was not a usable AdmissionReview.",
    ["webhook"],
)
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
