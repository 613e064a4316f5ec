"""The one metric of coexistence, declared once."""

from prometheus_client import Gauge

KUEUE_OVERLAP = Gauge(
    "raykueue_kueue_overlap",
    "1 while raykueue finds a setup in which Kueue could take an opted-in cluster or count a pod twice",
    ["kind"],
)
