"""`raykueue serve` SIGKILLed at random points of scale-ups and scale-downs, 20 rounds.

Real KubeRay scales a RayCluster's workers up and down; at a random moment
in each change the controller's process is killed and started again. After
every round, read from the API server:

1. no pod keeps the gate without a Workload for longer than `within()` one
   resync (counted from when the restarted controller is ready, sampled
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

from controller import workload as w
from tests.e2e.test_controller_e2e import (  # noqa: F401 - fixtures
    CQS,
    RAYCLUSTERS,
    admin,
    cq_usage,
    gated,
    millicores,
    pods,
    queue,
    raycluster,
    role,
    running,
    webhooks,
    workloads,
)
from tests.stackfixtures import RaykueueServer
from tests.waiting import wait_for, within
from webhooks import contract as c

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


class Watcher:
    """Samples the namespace; remembers the longest a gated pod went without a Workload."""

    def __init__(self, admin, ns: str) -> None:  # noqa: F811
        self.admin, self.ns = admin, ns
        self.ready_at = time.monotonic()
        self.without: dict[str, float] = {}  # pod uid -> since when (seen gated, no Workload)
        self.worst = 0.0
        self.worst_pod = ""
        # Not counted against the controller, but shows the check bites: pods
        # seen gated without a Workload at all, and the longest such wait
        # including the controller's downtime.
        self.pods_seen_without: set[str] = set()
        self.worst_raw = 0.0

    def sample(self) -> dict[str, Any]:
        everything = [p for p in pods(self.admin, self.ns, "rc")
                      if not p["metadata"].get("deletionTimestamp")]
        ours = [x for x in workloads(self.admin, self.ns) if w.is_ours(x)]
        live = [x for x in ours if not w.is_finished(x) and not x["metadata"].get(
            "deletionTimestamp")]
        by_uid: dict[str, list[dict[str, Any]]] = {}
        for wl in live:
            by_uid.setdefault(w.pod_uid_of(wl) or "", []).append(wl)
        now = time.monotonic()
        seen = set()
        for pod in everything:
            uid = pod["metadata"]["uid"]
            if gated(pod) and not by_uid.get(uid):
                seen.add(uid)
                self.pods_seen_without.add(uid)
                self.worst_raw = max(self.worst_raw, now - self.without.setdefault(uid, now))
                since = max(self.without[uid], self.ready_at)
                if now - since > self.worst:
                    self.worst, self.worst_pod = now - since, pod["metadata"]["name"]
        self.without = {uid: t for uid, t in self.without.items() if uid in seen}
        return {"pods": everything, "live": live, "by_uid": by_uid}


def converged(watcher: Watcher, workers: int):
    want_running = min(workers, ADMISSIBLE_WORKERS)
    want_gated = workers - want_running

    def check() -> dict[str, Any] | None:
        s = watcher.sample()
        worker_pods = [p for p in s["pods"] if role(p) == "worker"]
        ok = (any(running(p) for p in s["pods"] if role(p) == "head")
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
    watcher = Watcher(admin, ns)
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
            kill(killable)
            scale(admin, ns, target, victims)
        else:
            scale(admin, ns, target, victims)
            threading.Event().wait(delay)
            kill(killable)
        watcher.ready_at = float("inf")  # while it is down nothing counts against it
        watcher.sample()
        threading.Event().wait(rng.uniform(0.0, 1.0))
        watcher.sample()
        killable.start()
        watcher.ready_at = time.monotonic()
        wait_for(converged(watcher, target), timeout=SETTLE_TIMEOUT,
                 message=lambda n=n, a=workers, b=target: f"round {n}: {a}->{b} workers to "
                                                          f"settle: {summary(watcher)}")
        check_invariants(admin, ns, watcher, target)
        assert watcher.worst <= within(RESYNC_SECONDS), \
            f"pod {watcher.worst_pod} was gated without a Workload for {watcher.worst:.1f}s"
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
                         for p in s["pods"]}})
