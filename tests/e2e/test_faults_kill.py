"""`raykueue serve` SIGKILLed at random points of scale-ups and scale-downs, 20 rounds.

Real KubeRay scales a RayCluster's workers up and down; at a random moment
in each change the controller's process is killed and started again. After
every round, read from the API server:

1. no pod keeps the gate without a Workload for longer than `within()` one
   resync (counted from when the restarted controller is ready, watched
   throughout; a pod the controller misses waits forever, a slow machine adds
   seconds); the longest wait is printed and bench/RESULTS.md records it,
2. no Workload is orphaned: every live Workload of ours belongs to a pod that
   exists (uid and all), and every pod has exactly one,
3. the ClusterQueue's usage equals the admitted pods that exist (its count and
   its CPU, once Kueue's status has caught up).

The seed is printed; RAYKUEUE_FAULT_SEED replays a run.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube.cache import WatchCache
from raykueue.kube.resources import PODS
from testkit.e2e.controller import (  # noqa: F401 - fixtures
    CQS,
    RAYCLUSTERS,
    WORKLOADS,
    admin,
    cq_usage,
    millicores,
    pods,
    queue,
    raycluster,
    webhooks,
    workloads,
)
from testkit.pods import gated, role, running
from testkit.servers import RaykueueServer
from testkit.waiting import wait_for, within
from testkit.watches import Watching

ROUNDS = int(os.environ.get("RAYKUEUE_FAULT_ROUNDS", "20"))
SEED = int(os.environ.get("RAYKUEUE_FAULT_SEED", str(int(time.time()) % 100_000)))
RESYNC_SECONDS = 5.0
HEAD_MILLI, WORKER_MILLI = 100, 200  # a worker's 200m is KubeRay's wait-gcs-ready init container
ADMISSIBLE_WORKERS = 6
MAX_WORKERS = 9
# The process needs a moment to start; a gate is counted against the
# controller only from when it is ready again.
SETTLE_TIMEOUT = 120


@pytest.fixture
def killable(e2e_stack, webhooks, tmp_path_factory) -> Iterator[RaykueueServer]:  # noqa: F811
    server = RaykueueServer(e2e_stack, tmp_path_factory.mktemp("raykueue-killable"),
                            register=False,
                            env={"RAYKUEUE_LEADER_ELECTION": "false",
                                 "RAYKUEUE_RESYNC_SECONDS": str(RESYNC_SECONDS),
                                 "RAYKUEUE_LOG_LEVEL": "WARNING"})
    server.start()
    yield server
    server.stop()


def kill(server: RaykueueServer) -> None:
    assert server.proc is not None
    os.killpg(server.proc.pid, signal.SIGKILL)
    server.proc.wait(timeout=10)
    server.proc = None


class Watcher(Watching):
    """Watches the namespace's pods and Workloads for the whole test (every change,
    not samples) and remembers the longest a gated pod went without a Workload."""

    def __init__(self, admin, ns: str) -> None:  # noqa: F811
        self.ready_at = time.monotonic()
        self.without: dict[str, float] = {}  # pod uid -> since when (gated, no Workload)
        self.worst = 0.0
        self.worst_pod = ""
        # Not counted against the controller, but shows the check bites: pods
        # gated without a Workload at some point, and the longest such wait
        # including the controller's downtime.
        self.pods_seen_without: set[str] = set()
        self.worst_raw = 0.0
        self._lock = threading.Lock()
        self._names: dict[str, str] = {}  # pod uid -> name
        selector = f"{c.CLUSTER_LABEL}=rc"
        self._pods = WatchCache(admin, PODS, namespace=ns, label_selector=selector)
        self._workloads = WatchCache(admin, WORKLOADS, namespace=ns)
        self._pods.add_handler(lambda _, pod: self._check(pod["metadata"]["uid"]))
        self._workloads.add_handler(lambda _, wl: self._check(w.pod_uid_of(wl) or ""))
        self.caches = (self._pods, self._workloads)

    def controller_down(self) -> None:
        with self._lock:
            self.ready_at = float("inf")  # while it is down nothing counts against it

    def controller_ready(self) -> None:
        with self._lock:
            self.ready_at = time.monotonic()

    def _check(self, uid: str) -> None:
        """Called on every change to a pod or to a Workload of a pod."""
        state = self.sample()
        pod = next((p for p in state["pods"] if p["metadata"]["uid"] == uid), None)
        now = time.monotonic()
        with self._lock:
            if pod is not None and gated(pod) and not state["by_uid"].get(uid):
                self._names[uid] = pod["metadata"]["name"]
                self.without.setdefault(uid, now)
                self.pods_seen_without.add(uid)
            elif uid in self.without:
                self._close(uid, now)

    def _close(self, uid: str, now: float) -> None:
        since = self.without.pop(uid)
        self.worst_raw = max(self.worst_raw, now - since)
        counted = now - max(since, self.ready_at)
        if counted > self.worst:
            self.worst, self.worst_pod = counted, self._names.get(uid, uid)

    def longest(self) -> float:
        """The longest gap so far, counting gaps still open."""
        now = time.monotonic()
        with self._lock:
            open_gaps = [now - max(since, self.ready_at) for since in self.without.values()]
            return max([self.worst, *open_gaps])

    def sample(self) -> dict[str, Any]:
        everything = [p for p in self._pods.list()
                      if not p["metadata"].get("deletionTimestamp")]
        ours = [x for x in self._workloads.list() if w.is_ours(x)]
        live = [x for x in ours if not w.is_finished(x) and not x["metadata"].get(
            "deletionTimestamp")]
        by_uid: dict[str, list[dict[str, Any]]] = {}
        for wl in live:
            by_uid.setdefault(w.pod_uid_of(wl) or "", []).append(wl)
        return {"pods": everything, "live": live, "by_uid": by_uid}


def converged(watcher: Watcher, workers: int):
    want_running = min(workers, ADMISSIBLE_WORKERS)
    want_gated = workers - want_running

    def check() -> dict[str, Any] | None:
        s = watcher.sample()
        worker_pods = [p for p in s["pods"] if role(p) == "worker"]
        uids = {p["metadata"]["uid"] for p in s["pods"]}
        # A victim's Workload outlives its pod for a moment (freed by the controller,
        # or by the garbage collector if the pod went while the controller was down):
        # settled means those are gone too, so check_invariants' orphan rule is exact.
        ok = (any(running(p) for p in s["pods"] if role(p) == "head")
              and all(w.pod_uid_of(x) in uids for x in s["live"])
              and len(worker_pods) == workers
              and sum(1 for p in worker_pods if running(p)) == want_running
              and sum(1 for p in worker_pods if gated(p)) == want_gated
              and all(len(s["by_uid"].get(p["metadata"]["uid"], [])) == 1 for p in s["pods"]))
        return s if ok else None
    return check


def scale(admin, ns: str, workers: int, victims: list[str]) -> None:  # noqa: F811
    group = raycluster("rc", workers, cpu="100m", memory="1Gi")["spec"]["workerGroupSpecs"][0]
    group["scaleStrategy"] = {"workersToDelete": victims}
    admin.merge_patch(RAYCLUSTERS.path(ns, "rc"), {"spec": {"workerGroupSpecs": [group]}})


def test_controller_killed_at_random_points_of_scaling(admin, killable, queue):  # noqa: F811
    rng = random.Random(SEED)
    print(f"\n[faults] seed {SEED} ({ROUNDS} rounds); replay with RAYKUEUE_FAULT_SEED={SEED}")
    quota = HEAD_MILLI + ADMISSIBLE_WORKERS * WORKER_MILLI
    ns = queue(cpu=f"{quota}m", memory="64Gi")
    admin.create(RAYCLUSTERS.path(ns), raycluster("rc", 0, cpu="100m", memory="1Gi"))
    with Watcher(admin, ns) as watcher:
        run_rounds(admin, ns, killable, watcher, rng)


def run_rounds(admin, ns: str, killable: RaykueueServer, watcher: Watcher,  # noqa: F811
               rng: random.Random) -> None:
    wait_for(converged(watcher, 0), timeout=SETTLE_TIMEOUT, message="the head alone")

    t_start = time.monotonic()
    workers = 0
    figures: list[str] = []
    for n in range(ROUNDS):
        t0 = time.monotonic()
        target = rng.choice([x for x in range(MAX_WORKERS + 1) if x != workers])
        current = [p["metadata"]["name"] for p in watcher.sample()["pods"] if role(p) == "worker"]
        victims = rng.sample(current, workers - target) if target < workers else []
        # A random point of the change, a third of the time before it begins (the
        # restarted controller must catch up on pods made while it was down).
        # This is fault timing, not a wait for a state.
        delay = rng.choice([-1.0, rng.uniform(0.0, 2.0), rng.uniform(0.0, 2.0)])
        if delay < 0:
            watcher.controller_down()
            kill(killable)
            scale(admin, ns, target, victims)
        else:
            scale(admin, ns, target, victims)
            threading.Event().wait(delay)
            watcher.controller_down()
            kill(killable)
        threading.Event().wait(rng.uniform(0.0, 1.0))  # downtime, also fault timing
        killable.start()
        watcher.controller_ready()
        wait_for(converged(watcher, target), timeout=SETTLE_TIMEOUT,
                 message=lambda n=n, a=workers, b=target: f"round {n}: {a}->{b} workers to "
                                                          f"settle: {summary(watcher)}")
        check_invariants(admin, ns, watcher, target)
        longest = watcher.longest()
        assert longest <= within(RESYNC_SECONDS), \
            f"pod {watcher.worst_pod} was gated without a Workload for {longest:.1f}s"
        when = "before" if delay < 0 else f"@{delay:.2f}s"
        figures.append(f"{workers}->{target} kill {when} {time.monotonic() - t0:.1f}s")
        workers = target
    total = time.monotonic() - t_start
    print(f"[faults] {ROUNDS} rounds in {total:.0f}s ({total / ROUNDS:.1f}s each); longest a "
          f"gated pod went without a Workload after the controller was back: "
          f"{watcher.worst:.2f}s (resync {RESYNC_SECONDS:.0f}s); {len(watcher.pods_seen_without)} "
          f"pods were seen gated without one at some point, for up to {watcher.worst_raw:.2f}s "
          f"counting the controller's downtime")
    print("[faults] rounds: " + "; ".join(figures))


def check_invariants(admin, ns: str, watcher: Watcher, workers: int) -> None:  # noqa: F811
    s = watcher.sample()
    uids = {p["metadata"]["uid"] for p in s["pods"]}
    # 2. Every live Workload of ours stands for a pod that exists.
    orphans = [x["metadata"]["name"] for x in s["live"] if w.pod_uid_of(x) not in uids]
    assert not orphans, f"orphaned Workloads: {orphans}"
    owners = [w.owner_pod(x) for x in s["live"]]
    assert all(o is not None and o[1] in uids for o in owners)
    # 3. Kueue's books match the pods: the head and the running workers are admitted.
    admitted = [x for x in s["live"] if w.is_admitted(x)]
    assert len(admitted) == 1 + min(workers, ADMISSIBLE_WORKERS)
    want_milli = HEAD_MILLI + min(workers, ADMISSIBLE_WORKERS) * WORKER_MILLI

    def books() -> tuple[int | None, int]:
        status = admin.get(CQS.path(None, f"e2e-{ns}")).get("status") or {}
        return status.get("admittedWorkloads"), millicores(cq_usage(admin, ns).get("cpu", "0"))

    wait_for(lambda: books() == (len(admitted), want_milli), timeout=60,
             message=lambda: f"ClusterQueue (admitted, cpu) == {(len(admitted), want_milli)}, "
                             f"is {books()}")
    for pod in s["pods"]:
        if running(pod):
            assert c.GATE not in [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def summary(watcher: Watcher) -> str:
    s = watcher.sample()
    return str({"pods": {p["metadata"]["name"]: ("running" if running(p) else "gated"
                                                 if gated(p) else "other",
                                                 len(s["by_uid"].get(p["metadata"]["uid"], [])))
                         for p in s["pods"]},
                "Workloads without a pod": [x["metadata"]["name"] for x in s["live"]
                                            if w.pod_uid_of(x) not in {p["metadata"]["uid"]
                                                                       for p in s["pods"]}]})
