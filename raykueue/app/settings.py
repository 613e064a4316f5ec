"""Every knob raykueue has, with its default and its environment variable.

Precedence: command-line flag, then `RAYKUEUE_<NAME>` environment variable,
then the default here. Lists are given in the environment as JSON
(`RAYKUEUE_DNS_NAMES='["raykueue.raykueue-system.svc"]'`) or comma-separated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import orjson
from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from raykueue.core import contract as c
from raykueue.core.priority import PodPriority, PriorityPolicy

CommaList = Annotated[list[str], NoDecode]
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RAYKUEUE_", extra="ignore")

    # --- serving ---------------------------------------------------------------
    # Address the HTTPS listener binds; 0.0.0.0 in a pod, 127.0.0.1 to keep a dev server local.
    host: str = "0.0.0.0"
    # HTTPS port of the webhooks and /metrics; change it with the Service's targetPort.
    port: int = 9443
    # Holds tls.crt/tls.key (mounted or generated); point it at a writable or mounted directory.
    cert_dir: Path = Path("certs-local")
    # SANs of a generated serving certificate; ignored when tls.crt is given.
    dns_names: CommaList = Field(default_factory=lambda: ["localhost"])
    # IP SANs of a generated serving certificate; add the address the API server calls if not by DNS.
    ip_addresses: CommaList = Field(default_factory=lambda: ["127.0.0.1"])
    # An AdmissionReview holds the object and, on update, the old one; etcd
    # caps an object at 1.5 MiB, so 4 MiB leaves room and stops abuse.
    max_body_bytes: int = 4 * 1024 * 1024
    # Multi-replica installs share one CA and serving pair through this Secret
    # (kubernetes.io/tls in pod_namespace). The Lease holder creates, rotates and
    # injects it; every replica reads it through the API every poll interval.
    cert_secret: str | None = None
    # The namespace and ServiceAccount this pod runs as; the manifests and the
    # chart hand both down from the pod itself (downward API), so they are right
    # in whatever namespace raykueue is installed. Together they name the
    # controller identity unless controller_identities is set.
    pod_namespace: str = c.DEFAULT_NAMESPACE
    # The ServiceAccount this pod runs as (see pod_namespace); names the default controller identity.
    service_account: str = c.DEFAULT_SERVICE_ACCOUNT
    # How often each replica rereads cert_secret; lower it for faster pickup of a rotation.
    cert_secret_poll_seconds: float = 10.0
    # Write our CA into the three webhook configurations' caBundle (in-cluster
    # installs; tests register their own webhooks with the CA they generated).
    # With cert_secret only the leader writes; a reset caBundle is put back
    # within min(cert_secret_poll_seconds, ca_bundle_interval_seconds).
    inject_ca_bundle: bool = False
    # How often the webhook configurations' caBundle is checked and put back if reset.
    ca_bundle_interval_seconds: float = 60.0
    # A CA rotation reissues the serving pair only after every configuration's
    # caBundle has held the new CA this long (the API server applies a
    # changed configuration through a watch, a moment after our read-back).
    ca_trust_settle_seconds: float = 5.0
    # DEBUG, INFO, WARNING or ERROR; DEBUG logs every controller decision.
    log_level: str = "INFO"
    # json: one object per line for a log pipeline; text: key=value lines for a
    # person; auto: text when stderr is a terminal, else JSON (always JSON in a pod).
    log_format: Literal["auto", "json", "text"] = "auto"
    # Seconds an idle client connection stays open (uvicorn's own default is 5).
    # The API server keeps its idle webhook connections 90 s (client-go's
    # transport takes IdleConnTimeout from Go's http.DefaultTransport; where, in
    # bench/RESULTS.md). Closing sooner makes the first call after a pause pay a
    # new TLS handshake; longer means the API server is the one that closes,
    # never us mid-request.
    keep_alive_seconds: int = Field(default=120, gt=0)
    # How long a thread may hold the GIL before one that waits for it asks for a
    # turn (sys.setswitchinterval; Python's own default is 5 ms). The event loop
    # that answers the API server shares the process with the controller's watch
    # and worker threads: a review that arrives while they parse and decide waits
    # up to this long, per thread ahead of it, before its handler runs. 0.5 ms
    # brought the webhook's p50, as the API server measures it, closer to a
    # bare-ASGI server's than Python's 5 ms did (the runs: bench/RESULTS.md).
    switch_interval_ms: float = Field(default=0.5, gt=0)

    # --- cluster ---------------------------------------------------------------
    # Cluster to watch outside a pod; unset: KUBECONFIG, the in-cluster account, then ~/.kube/config.
    kubeconfig: str | None = None
    # When False the server never contacts a cluster, even if one is configured
    # (admission-only). Left True with no cluster configured it is admission-only too.
    cluster: bool = True
    # How long the first call to the API server may take before it counts as not answering.
    probe_timeout_seconds: float = 3.0
    # A configured cluster (in a pod, or a kubeconfig) that does not answer is asked
    # again, with exponential backoff up to this many seconds, for as long as it
    # takes; the replica is not ready meanwhile and never runs admission-only.
    connect_backoff_max_seconds: float = Field(default=15.0, gt=0)
    # How long the controller waits for its caches before it says so and waits on.
    cache_sync_timeout_seconds: float = 60.0
    # How long a stamped pod's review may wait on the API server, in all, for the
    # Ray owners raykueue's caches do not hold yet (a new cluster's first moments):
    # read once per such review, off the event loop. Keep it well inside the pod
    # webhook's timeoutSeconds (5 in the manifests and the chart).
    owner_read_timeout_seconds: float = Field(default=2.0, gt=0)

    # --- admission policy ------------------------------------------------------
    # WorkloadPriorityClass given to a head pod that names none; heads should outrank workers.
    head_priority_class: str = c.DEFAULT_HEAD_PRIORITY_CLASS
    # WorkloadPriorityClass given to a worker pod that names none.
    worker_priority_class: str = c.DEFAULT_WORKER_PRIORITY_CLASS
    # WorkloadPriorityClasses only heads may name (a worker pod or worker group
    # template naming one is denied). Empty: the head class alone.
    head_only_priority_classes: CommaList = Field(default_factory=list)
    # Usernames allowed to lift the gate. Unset: the controller's own account,
    # system:serviceaccount:<pod_namespace>:<service_account> (filled in below).
    # Set it only when another process (or account) runs the controller.
    controller_identities: CommaList = Field(default_factory=list)
    # Off by default: also set the pod's Kubernetes PriorityClass.
    set_pod_priority: bool = False
    # Kubernetes PriorityClass for heads when set_pod_priority is on.
    head_pod_priority_class: str = c.DEFAULT_HEAD_POD_PRIORITY_CLASS
    # Kubernetes PriorityClass for workers when set_pod_priority is on.
    worker_pod_priority_class: str = c.DEFAULT_WORKER_POD_PRIORITY_CLASS

    # --- controller ------------------------------------------------------------
    # Run the controller in this process; off when another deployment runs it (webhooks only).
    controller: bool = True
    # Workers wait for their head's admission before getting Workloads; off lets them queue at once.
    head_first: bool = True
    # Write PodsReady on Workloads: "auto" follows Kueue's waitForPodsReady as
    # its Configuration says (on in Kueue v1beta2 unless its DisableWaitForPodsReady
    # gate is set), since only then does Kueue act on it (it evicts Workloads that
    # never get it); off saves one write per pod. "true"/"false" force it.
    pods_ready: Literal["auto", "true", "false"] = "auto"
    # Written into an opted-in Ray cluster's autoscaler env on creation
    # (RAY_AUTOSCALER_RECONCILE_ALLOCATE_STATUS_TIMEOUT_S) unless the user set it:
    # a worker waiting for quota is then kept, not recycled. 0 turns it off.
    autoscaler_allocate_timeout_seconds: int = 86400
    # --- Kueue beside us (read, never written) -----------------------------------
    # Namespace of Kueue's manager, whose ConfigMap is read to detect overlaps.
    kueue_namespace: str = "kueue-system"
    # Name of Kueue's manager ConfigMap (Helm installs may rename it).
    kueue_config_map: str = "kueue-manager-config"
    # Reconcile threads; raise for thousands of pods, at the cost of more API calls at once.
    controller_workers: int = 4
    # Every managed pod is reconciled again this often, a safety net for a
    # missed watch event.
    resync_seconds: float = 300.0
    # A gated pod with no Workload (and no head to wait for) this long gets a
    # Warning Event saying why; raykueue_gated_pod_oldest_age_seconds is refreshed
    # every stuck_interval_seconds.
    stuck_grace_seconds: float = 120.0
    # How often the stuck-gates gauge is refreshed and overdue pods are looked at.
    stuck_interval_seconds: float = 15.0
    # The leader looks this often (and on each RayCluster event) for opted-in
    # RayClusters with unstamped templates or running pods raykueue does not
    # manage, and adopts them (controller/adopt.py); it never deletes a pod.
    adopt_interval_seconds: float = Field(default=30.0, gt=0)
    # A pod past raykueue's gate whose own Workload is not admitted this long (from
    # the Workload's creation or its last admission change) runs outside Kueue's
    # quota and is removed, workers before heads (controller/removal.py).
    outside_quota_grace_seconds: float = Field(default=120.0, ge=0)
    # A pod gone from the API server is its Workload's only owner, so the garbage
    # collector deletes the Workload; raykueue deletes it only if it is still
    # there this long after the pod went (both deleting is a DELETE more per pod).
    # 0: raykueue deletes at once, racing the collector.
    collector_grace_seconds: float = Field(default=5.0, ge=0)
    # "enforce": pods are removed when the live reads prove one of the two causes
    # (Kueue evicted their Workload, or outside quota past the grace). "report":
    # no pod is ever deleted; each removal becomes an Event and a metric only.
    enforcement: Literal["enforce", "report"] = "enforce"
    # Hold a Lease before running the controller; off only with a single replica.
    leader_election: bool = True
    # Where the Lease lives. Unset: the pod's own namespace in-cluster (the
    # manifests set it from the downward API), else "default", so that
    # `raykueue serve` against a dev cluster leads without any setup.
    lease_namespace: str | None = None
    # Name of the controller's Lease; change it to run two installs in one namespace.
    lease_name: str = "raykueue-controller"
    # Failover takes up to lease_seconds + retry_seconds after a leader dies
    # without releasing the Lease; a graceful stop releases it at once.
    # Same defaults as client-go's leader election.
    lease_seconds: int = 15
    # Deadline for the leader to renew its Lease (see lease_seconds).
    renew_seconds: float = 10.0
    # How often a follower tries to take the Lease (see lease_seconds).
    retry_seconds: float = 2.0

    @property
    def priority_policy(self) -> PriorityPolicy:
        """The one priority policy (core/priority.py) the webhooks and the controller read."""
        pod_priority = (PodPriority(self.head_pod_priority_class, self.worker_pod_priority_class)
                        if self.set_pod_priority else None)
        return PriorityPolicy(self.head_priority_class, self.worker_priority_class, pod_priority,
                              frozenset(self.head_only_priority_classes))

    @field_validator("dns_names", "ip_addresses", "controller_identities", "head_only_priority_classes",
                     mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return orjson.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        # Checked here, not at logging setup: a typo is then the one-line settings error.
        level = value.strip().upper()
        if level not in _LEVELS:
            raise ValueError(f"not a log level: use one of {', '.join(_LEVELS)}")
        return level

    @model_validator(mode="after")
    def _controller_identity(self) -> Settings:
        # A fixed default named raykueue-system's account: installed anywhere
        # else (Helm's release namespace), no gate was ever lifted.
        if not self.controller_identities:
            self.controller_identities = [
                c.service_account_user(self.pod_namespace, self.service_account)]
        return self

    @model_validator(mode="after")
    def _worker_class_is_not_head_only(self) -> Settings:
        problem = self.priority_policy.problem()
        if problem is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _lease_timing(self) -> Settings:
        # A renew deadline at or past the lease would let two leaders overlap.
        if not 0 < self.retry_seconds < self.renew_seconds < self.lease_seconds:
            raise ValueError(
                "leader election needs 0 < RAYKUEUE_RETRY_SECONDS < RAYKUEUE_RENEW_SECONDS"
                f" < RAYKUEUE_LEASE_SECONDS; got {self.retry_seconds}, {self.renew_seconds},"
                f" {self.lease_seconds}"
            )
        return self
