"""The controller's Prometheus metrics (default registry, served by app).

Defined at import, once per process: prometheus_client refuses a second
registration of a name, and the leader may start and stop the controller
many times in one process.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# Latencies from a pod's creation to its gate being lifted span queueing time:
# seconds to hours.
_WAIT_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600)
# Admitted -> gate lifted is our own reaction time: milliseconds to seconds.
_REACTION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

GATED_PODS = Gauge(
    "raykueue_gated_pods",
    "Pods carrying raykueue's scheduling gate, by Ray role.",
    ["role"],
)
GATE_AGE = Histogram(
    "raykueue_gate_age_seconds",
    "Seconds from a pod's creation to raykueue lifting its gate.",
    ["role"],
    buckets=_WAIT_BUCKETS,
)
ADMITTED_TO_LIFTED = Histogram(
    "raykueue_admitted_to_gate_lifted_seconds",
    "Seconds from the controller seeing a Workload Admitted to the gate-lifting patch "
    "being accepted (from the Admitted condition's time when the controller did not "
    "see the transition).",
    buckets=_REACTION_BUCKETS,
)
WORKLOADS_CREATED = Counter(
    "raykueue_workloads_created",
    "Workloads created for gated pods, by Ray role.",
    ["role"],
)
WORKLOADS_DELETED = Counter(
    "raykueue_workloads_deleted",
    "Workloads deleted by raykueue because their pod was being deleted, by reason. The "
    "Workload of a pod that is already gone is left to the garbage collector "
    "(RAYKUEUE_COLLECTOR_GRACE_SECONDS) and not counted here: see raykueue_workloads_gone.",
    ["reason"],
)
WORKLOADS_GONE = Counter(
    "raykueue_workloads_gone",
    "raykueue's Workloads seen deleted, whoever deleted them (raykueue, the garbage "
    "collector, a user), by Ray role: beside raykueue_workloads_created, the churn.",
    ["role"],
)
WORKLOADS_FINISHED = Counter(
    "raykueue_workloads_finished",
    "Workloads marked Finished by raykueue, by reason.",
    ["reason"],
)
PODS_EVICTED = Counter(
    "raykueue_pods_evicted",
    "Pods deleted after a live confirmation (controller/removal.py), by Ray role and "
    "reason: Kueue's eviction reason, or OutsideQuota (past the gate, Workload not "
    "admitted past the grace).",
    ["role", "reason"],
)
POD_REMOVALS = Counter(
    "raykueue_pod_removals",
    "Pod removals raykueue decided, by cause and outcome: deleted (the live reads proved "
    "it), reported (proved, RAYKUEUE_ENFORCEMENT=report) or not_proven (the live reads did "
    "not prove it: the pod is kept and an Event says why). Causes KueueEvicted and "
    "OutsideQuota are the only ones that delete; not_proven is labelled with the cause "
    "that was proposed.",
    ["cause", "outcome"],
)
CONFLICTS = Counter(
    "raykueue_conflicts",
    "Pods raykueue left alone because something else claims them, by kind.",
    ["kind"],
)
API_WRITES = Counter(
    "raykueue_api_writes",
    "Write requests the controller sent to the API server, by verb and resource.",
    ["verb", "resource"],
)
RECONCILE_ERRORS = Counter(
    "raykueue_reconcile_errors",
    "Reconciles that failed and were retried.",
)
GATED_OLDEST_AGE = Gauge(
    "raykueue_gated_pod_oldest_age_seconds",
    "Age of the oldest pod still behind raykueue's gate, by namespace, LocalQueue and reason: "
    "waiting_for_quota (its Workload is not admitted), waiting_for_head (a worker whose "
    "head is not admitted, head-first) or no_workload (neither; see the pod's Events).",
    # A LocalQueue is namespaced: without the namespace every namespace's
    # queue `default` would be one series.
    ["namespace", "queue", "reason"],
)
