"""Ray for the stack's pods: kwok runs pods that run nothing; this runs Ray for them.

`RayTier` owns every Ray process a test session starts (heads, workers,
autoscalers, drivers) and watches them for the whole of it: peak memory,
sockets off 127.0.0.1, processes that died on their own. `RayClusterRunner`
follows one RayCluster's pods through the API server: once the head pod is
Running it starts a Ray head standing in for it, then the autoscaler (when the
head pod has its sidecar: KubeRay's in-tree autoscaling is on); for
each worker pod kwok reports Running, a Ray worker; when that pod goes (or
stops running), SIGTERM to that worker's own pid; when the head pod goes, the
same for all of them. Given the stack's dashboard routes, the head also stands
in for the head pod's Services (devstack/ray/dashboard_proxy.py), so that the
KubeRay operator reaches its dashboard (RayJobs); a SidecarMode RayJob's head
pod's submitter container runs too, against that head (devstack/ray/submitter.py).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..controlplane import pki
from ..controlplane.kubeapi import KubeApi, KubeError
from ..stack import free_ports, tail
from . import autoscaler as ray_autoscaler
from . import node as ray_node
from . import submitter as ray_submitter
from .dashboard_proxy import DASHBOARD_PORT_NAME, Routes, service_host
from .procs import (
    RayProcess,
    RayProcessError,
    describe,
    off_loopback,
    pss_bytes,
    session_members,
    spawn,
)

POLL_SECONDS = 0.3
ROUTE_SECONDS = 1.0  # how often a running head's Services are looked up
SAMPLE_SECONDS = 1.0
HEAD_START_TIMEOUT = 90.0
# A starting raylet gives its node's dashboard agent 15 s to write its listen
# port (fixed in Ray 2.60's node_manager.cc, no setting) and aborts after; the
# agent is a Python process whose imports alone take that long on a busy
# 2-core machine. So the tier starts one node at a time (any cluster's), and a
# start that fails that way is tried again (each attempt noted; the last
# failure fails the test).
START_ATTEMPTS = 3
STARTED_LINE = b"Ray runtime started"
WORKER_STOP_GRACE = 10.0
# What a worker's `ray start --block` prints (its raylet.out tail) when the node shut
# itself down because Ray's autoscaler drained it (idle termination, or preemption):
# autoscaler v2 drains a node first and only then asks KubeRay to delete its pod, so
# for a few seconds the pod still runs with its Ray process gone. A real container
# exits the same way; that is an end, not a failure.
DRAINED_BY_AUTOSCALER = "death info: reason: AUTOSCALER_DRAIN"
DRAINED_TAIL_LINES = 400
GEN_CMD_ENV = "KUBERAY_GEN_RAY_START_CMD"


@dataclass
class Watched:
    """What the tier saw over its whole life."""

    peak_pss: int = 0
    peak_processes: int = 0
    off_loopback: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    retried_starts: list[str] = field(default_factory=list)


class RayTier:
    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        # Ray's unix sockets live under the temp dir and must stay under 108
        # bytes with Ray's session name appended: a short root, short node dirs.
        self.root = Path(tempfile.mkdtemp(prefix="rk-", dir="/tmp"))
        self.procs: list[RayProcess] = []
        self.nodes: list[RayProcess] = []  # heads and workers
        # Sessions not the tier's own (stack processes it relies on) checked for loopback too.
        self.also_watched: list[int] = []
        self.watched = Watched()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._next_dir = 0
        self._sampler = threading.Thread(target=self._sample_loop, name="ray-tier-sampler", daemon=True)
        self._sampler.start()

    def temp_dir(self) -> str:
        with self._lock:
            self._next_dir += 1
            return str(self.root / f"n{self._next_dir}")

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None,
              pipes: bool = False, node: bool = False) -> RayProcess:
        proc = spawn(name, argv, self.log_dir / f"{name}.log", env, cwd=self.root, pipes=pipes)
        with self._lock:
            self.procs.append(proc)
            if node:
                self.nodes.append(proc)
        return proc

    def may_start_node(self) -> bool:
        """No node of the tier is still starting."""
        with self._lock:
            return not any(p.exited() is None and not started(p) for p in self.nodes)

    def sessions(self) -> list[int]:
        with self._lock:
            return [p.pid for p in self.procs]

    def error(self, text: str) -> None:
        with self._lock:
            self.watched.errors.append(text)

    def note_retry(self, text: str) -> None:
        with self._lock:
            self.watched.retried_starts.append(text)

    def check(self) -> None:
        """Raise the first error any Ray process had (with its log)."""
        if self.watched.errors:
            raise RayProcessError(self.watched.errors[0])

    def watch_sessions(self, pids: list[int]) -> None:
        """Check these sessions' sockets too (not their memory, not as leftovers)."""
        with self._lock:
            self.also_watched += pids

    def sample(self) -> None:
        sessions = self.sessions()
        members = session_members(sessions)
        pss = pss_bytes(members)
        with self._lock:
            others = list(self.also_watched)
        bad = off_loopback(sessions + others)
        with self._lock:
            self.watched.peak_pss = max(self.watched.peak_pss, pss)
            self.watched.peak_processes = max(self.watched.peak_processes, len(members))
            self.watched.off_loopback += [b for b in bad if b not in self.watched.off_loopback]

    def _sample_loop(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            try:
                self.sample()
            except Exception as e:  # a sampler that dies silently would hide violations
                self.error(f"sampler: {type(e).__name__}: {e}")

    def leftovers(self) -> list[str]:
        return describe(session_members(self.sessions()))

    def close(self, keep_files: bool = False) -> list[str]:
        """Stop every process still running; returns what outlived even that.
        Ray's own logs (under the temp root) stay when `keep_files` or something did."""
        self._stop.set()
        self._sampler.join(timeout=5)
        for proc in list(self.procs):
            proc.stop()
        left = self.leftovers()
        if not left and not keep_files:
            shutil.rmtree(self.root, ignore_errors=True)
        return left


def _running(pod: dict) -> bool:
    return pod.get("status", {}).get("phase") == "Running" and not pod["metadata"].get(
        "deletionTimestamp")


def started(proc: RayProcess) -> bool:
    try:
        return STARTED_LINE in proc.log.read_bytes()
    except OSError:
        return False


def _generated_cmd(pod: dict) -> str:
    for container in pod["spec"]["containers"]:
        for var in container.get("env") or []:
            if var["name"] == GEN_CMD_ENV:
                return var.get("value", "")
    return ""


class RayClusterRunner:
    """Ray processes for one RayCluster's pods; `start()`, `close()`."""

    def __init__(self, tier: RayTier, api: KubeApi, ca: pki.Pair, namespace: str, cluster: str,
                 routes: Routes | None = None):
        self.tier, self.api, self.ca, self.routes = tier, api, ca, routes
        self.namespace, self.cluster = namespace, cluster
        self.head: RayProcess | None = None
        self.head_pod: str | None = None
        self.head_temp_dir = ""
        self.gcs_port = 0
        self.dashboard_port = 0
        self.autoscaler: RayProcess | None = None
        # Workers join once the head is up: with the autoscaler running, or at once for a
        # cluster without KubeRay's in-tree autoscaling (no autoscaler container to stand in for).
        self.ready = False
        self.submitter: RayProcess | None = None  # a SidecarMode RayJob's, for the head pod
        self.submitters = 0  # submitter scripts started
        self.submitter_ended = False  # its end written into the head pod's status
        self.workers: dict[str, RayProcess] = {}  # pod name -> its Ray worker
        self.stopping: list[RayProcess] = []
        self.attempts: dict[str, int] = {}  # pod name -> starts of its Ray worker
        self.routed: set[tuple[str, int]] = set()  # (Service host, port) to the head's dashboard
        self.heads_stopped = 0  # heads stopped because their pod went
        self._routed_at = 0.0
        self.last_api_error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"ray-runner-{cluster}", daemon=True)

    @property
    def gcs_address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    def start(self) -> RayClusterRunner:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._unroute()
        for proc in [*self.workers.values(), *self.stopping, self.submitter, self.autoscaler, self.head]:
            if proc is not None:
                proc.stop()

    def head_ready(self) -> bool:
        return self.ready

    # ---- the loop ----------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            try:
                self._step()
            except RayProcessError as e:
                self.tier.error(str(e))
                return
            except (KubeError, OSError) as e:  # the API server busy or restarting: next tick
                self.last_api_error = f"{type(e).__name__}: {e}"

    def _step(self) -> None:
        self.stopping = [p for p in self.stopping if not p.reap(WORKER_STOP_GRACE)]
        pods = self.api.get(f"/api/v1/namespaces/{self.namespace}/pods",
                            query={"labelSelector": f"ray.io/cluster={self.cluster}"})["items"]
        running = {p["metadata"]["name"]: p for p in pods if _running(p)}
        heads = [p for p in running.values() if p["metadata"]["labels"].get("ray.io/node-type") == "head"]
        if self.head is not None and started(self.head) and not any(
                p["metadata"]["name"] == self.head_pod for p in heads):
            self._head_pod_gone()
        if self.head is None and heads and self.tier.may_start_node():
            self._start_head(heads[0])
        if self.head is not None and self._retry(self.head_pod or "", self.head):
            self.head = None  # started again on a later tick
        if self.head is not None:
            if started(self.head):
                self._route()
            if not self.ready:
                self._maybe_start_autoscaler(heads)
            else:
                if self.autoscaler is not None:
                    self._watch(self.autoscaler)
                self._maybe_start_submitter(heads)
        if not self.ready:
            return  # workers join a head that is up
        for name, pod in running.items():
            if name not in self.workers and pod["metadata"]["labels"].get("ray.io/node-type") == "worker" \
                    and self.tier.may_start_node():
                self._start_worker(pod)
        for name in [n for n in self.workers if n not in running]:
            proc = self.workers.pop(name)
            proc.terminate()
            self.stopping.append(proc)
        for name, proc in list(self.workers.items()):
            if drained(proc):
                proc.terminate()  # what is left of it; kept in `workers` so it never starts again
            elif self._retry(name, proc):
                del self.workers[name]

    def _watch(self, proc: RayProcess) -> None:
        # The autoscaler may see its RayCluster deleted before this loop sees the head pod go.
        if proc.exited() is not None and proc.stopping is None and not self._cluster_gone():
            raise proc.failure(f"exited with code {proc.exited()}")

    def _cluster_gone(self) -> bool:
        path = f"/apis/ray.io/v1/namespaces/{self.namespace}/rayclusters/{self.cluster}"
        return self.api.get_or_none(path) is None

    def _head_pod_gone(self) -> None:
        """Stop every Ray process of the cluster: the head stood in for a pod that is no more."""
        self._unroute()
        for proc in [*self.workers.values(), self.submitter, self.autoscaler, self.head]:
            if proc is not None:
                proc.terminate()
                self.stopping.append(proc)
        self.workers.clear()
        self.head = self.autoscaler = self.submitter = None
        self.ready = False
        self.submitter_ended = False
        self.head_pod = None
        self.heads_stopped += 1

    def _route(self) -> None:
        """Every Service selecting the head pod, at its dashboard port: to the local dashboard."""
        if self.routes is None or time.monotonic() - self._routed_at < ROUTE_SECONDS:
            return
        self._routed_at = time.monotonic()
        pod = self.api.get_or_none(f"/api/v1/namespaces/{self.namespace}/pods/{self.head_pod}")
        if pod is None:
            return
        labels = pod["metadata"].get("labels") or {}
        for svc in self.api.get(f"/api/v1/namespaces/{self.namespace}/services")["items"]:
            selector = svc["spec"].get("selector") or {}
            if not selector or any(labels.get(k) != v for k, v in selector.items()):
                continue
            for port in svc["spec"].get("ports") or []:
                key = (service_host(svc["metadata"]["name"], self.namespace), port["port"])
                if port.get("name") == DASHBOARD_PORT_NAME and key not in self.routed:
                    self.routes.add(*key, self.dashboard_port)
                    self.routed.add(key)

    def _unroute(self) -> None:
        if self.routes is not None:
            for key in self.routed:
                self.routes.remove(*key)
        self.routed.clear()

    def _retry(self, pod: str, proc: RayProcess) -> bool:
        """True when the node for `pod` failed to start and may be started again;
        raises (with its log) when it died after starting or used up its attempts."""
        if proc.exited() is None or proc.stopping is not None:
            return False
        if started(proc) or self.attempts[pod] >= START_ATTEMPTS:
            raise proc.failure(f"exited with code {proc.exited()} (start attempt {self.attempts[pod]})")
        self.tier.note_retry(f"{proc.name} attempt {self.attempts[pod]}: {tail(proc.log, 1).strip()}")
        return True

    def _start_head(self, pod: dict) -> None:
        self.gcs_port, self.dashboard_port, *agent = free_ports(2 + len(ray_node.AGENT_PORT_FLAGS))
        self.head_pod = pod["metadata"]["name"]
        self.head_temp_dir = self.tier.temp_dir()
        self.attempts[self.head_pod] = self.attempts.get(self.head_pod, 0) + 1
        self.head = self.tier.spawn(
            f"{self.cluster}-head-{self.head_pod}",
            ray_node.head_argv(self.gcs_port, self.dashboard_port, agent, self.head_temp_dir,
                               self.head_pod, _generated_cmd(pod)),
            ray_node.node_env(self.head_pod, ray_node.HEAD_GROUP), node=True)

    def _maybe_start_autoscaler(self, heads: list[dict]) -> None:
        assert self.head is not None
        if not started(self.head):  # its raylet registered, not just the GCS port open
            if time.monotonic() - self.head.started > HEAD_START_TIMEOUT:
                raise self.head.failure(f"not started after {HEAD_START_TIMEOUT:.0f}s")
            return
        pod = next((p for p in heads if p["metadata"]["name"] == self.head_pod), None)
        if pod is None:
            return
        if not any(ctr["name"] == ray_autoscaler.AUTOSCALER_CONTAINER for ctr in pod["spec"]["containers"]):
            self.ready = True
            return
        creds = ray_autoscaler.credentials(
            self.ca, self.tier.root / f"{self.cluster}-creds", self.namespace,
            pod["spec"].get("serviceAccountName") or self.cluster)
        (metric_port,) = free_ports(1)
        self.autoscaler = self.tier.spawn(
            f"{self.cluster}-autoscaler",
            ray_autoscaler.argv(self.cluster, self.namespace, self.gcs_address),
            ray_autoscaler.env(pod, self.api.server, self.api.ca_file, creds, metric_port))
        self.ready = True

    def _maybe_start_submitter(self, heads: list[dict]) -> None:
        """A SidecarMode RayJob's submitter container, run once the head is up (ray_submitter);
        a failed submission fails the test with its log, as KubeRay would fail the RayJob."""
        if self.submitter is not None:
            code = self.submitter.exited()
            if code is not None and self.submitter.stopping is None and not self.submitter_ended:
                self._submitter_ended(code)
                if code != 0:
                    raise self.submitter.failure(f"exited with code {code}")
            return
        pod = next((p for p in heads if p["metadata"]["name"] == self.head_pod), None)
        script = ray_submitter.sidecar_script(pod) if pod is not None else None
        if script is not None:
            self.submitter = self.tier.spawn(f"{self.cluster}-submitter-{self.head_pod}",
                                             ray_submitter.argv(script, self.dashboard_port),
                                             {"PYTHONUNBUFFERED": "1"})
            self.submitters += 1

    def _submitter_ended(self, code: int) -> None:
        """Say in the head pod's status that its submitter container ended (kwok would not)."""
        path = f"/api/v1/namespaces/{self.namespace}/pods/{self.head_pod}"
        pod = self.api.get(path)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - (
            time.monotonic() - self.submitter.started))) if self.submitter is not None else now
        statuses = ray_submitter.ended_statuses(pod, code, started, now)
        self.api.call("PATCH", f"{path}/status", {"status": {"containerStatuses": statuses}},
                      content_type="application/merge-patch+json")
        self.submitter_ended = True

    def _start_worker(self, pod: dict) -> None:
        name = pod["metadata"]["name"]
        agent = free_ports(len(ray_node.AGENT_PORT_FLAGS))
        self.workers[name] = self.tier.spawn(
            f"{self.cluster}-worker-{name}",
            ray_node.worker_argv(self.gcs_address, agent, self.tier.temp_dir(), name, _generated_cmd(pod)),
            ray_node.node_env(name, pod["metadata"]["labels"].get("ray.io/group", "")), node=True)
        self.attempts[name] = self.attempts.get(name, 0) + 1


def drained(proc: RayProcess) -> bool:
    """A worker node that exited because the autoscaler drained it (see DRAINED_BY_AUTOSCALER)."""
    return (proc.exited() is not None and proc.stopping is None
            and DRAINED_BY_AUTOSCALER in tail(proc.log, DRAINED_TAIL_LINES))
