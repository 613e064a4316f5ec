"""The metrics of coexistence (Kueue's setup, raykueue's admission policies), declared once."""

from prometheus_client import Gauge

KUEUE_OVERLAP = Gauge(
    "raykueue_kueue_overlap",
    "1 while raykueue finds a setup in which Kueue could take an opted-in cluster or count a pod twice",
    ["kind"],
)

POLICY_MISSING = Gauge(
    "raykueue_policy_missing",
    "1 while raykueue's ValidatingAdmissionPolicy is not enforced (missing, unbound, not served, "
    "or naming another account)",
    ["policy"],
)
