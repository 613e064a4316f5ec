"""The controller's knobs. `app` maps its settings onto this."""

from __future__ import annotations

from dataclasses import dataclass

from raykueue.controller.release import COLLECTOR_GRACE_SECONDS


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    # A worker's Workload waits until its cluster's head Workload is admitted,
    # so workers never hold quota for a cluster whose head cannot run.
    head_first: bool = True
    # Write PodsReady on each Workload. Kueue's waitForPodsReady evicts an
    # admitted Workload that never gets it; when that feature is off (Kueue's
    # default) nothing in Kueue acts on it but its ready-time metrics, and
    # turning this off saves one write per pod.
    pods_ready: bool = True
    # Owner of the Workload conditions we write by server-side apply and of
    # the pod condition written before an eviction.
    field_manager: str = "raykueue"
    workers: int = 4
    # Every pod is reconciled again this often, a safety net for a missed
    # event; the caches themselves relist only on 410 Gone.
    resync_seconds: float = 300.0
    cache_sync_timeout_seconds: float = 60.0
    # Retry backoff of a failed reconcile, doubling per consecutive failure.
    retry_base_seconds: float = 0.05
    retry_max_seconds: float = 30.0
    # "v1beta2" or "v1beta1"; None asks the API server which one it serves.
    workload_version: str | None = None
    # Restrict to one namespace (tests); None watches all namespaces.
    namespace: str | None = None
    # How often the oldest-gated-pod gauge is recomputed, and how long a gated pod
    # may wait without a Workload (and without a head-first reason) before it gets
    # an Event saying why (controller/stuck.py).
    stuck_interval_seconds: float = 15.0
    stuck_grace_seconds: float = 120.0
    # How long a pod past the gate may run while its own Workload is not admitted
    # before it is removed as outside quota (controller/removal.py).
    outside_quota_grace_seconds: float = 120.0
    # How long the garbage collector gets to delete the Workload of a pod that is
    # gone (it is the Workload's only owner) before the controller deletes it:
    # both deleting is one write more per pod, the second answered 404.
    collector_grace_seconds: float = COLLECTOR_GRACE_SECONDS
    # "enforce" removes what the live reads prove; "report" removes nothing and
    # says, in Events and a metric, what it would have removed.
    enforcement: str = "enforce"

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError("workers must be at least 1")
        if self.workload_version not in (None, "v1beta1", "v1beta2"):
            raise ValueError(f"unsupported Workload version {self.workload_version!r}")
        if self.enforcement not in ("enforce", "report"):
            raise ValueError(f"enforcement must be enforce or report, not {self.enforcement!r}")
