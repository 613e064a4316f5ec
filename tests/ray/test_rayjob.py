"""A RayJob opted in to raykueue: the KubeRay operator submits it, the real autoscaler grows it.

KubeRay makes the RayJob's RayCluster; raykueue gates its pods and Kueue admits
them; the Ray tier runs a Ray head for the head pod. The operator submits the
entrypoint to that head's dashboard; its tasks need workers, which the
autoscaler asks for and raykueue admits pod by pod. When the job has succeeded
the operator deletes the cluster, and every pod and Workload goes with it.
Judged through the API (the RayJob's status, each pod's way from gated to
running, the invariants of docs/KUEUE.md over the whole scenario) and through
Ray's own state (where the entrypoint's tasks ran, which nodes it saw).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from devstack.ray.procs import RayProcessError
from devstack.stack import tail
from raykueue.controller import workload as w
from raykueue.kube.resources import PODS
from testkit.e2e.controller import RAYCLUSTERS, WORKLOADS
from testkit.e2e.kueue_shipped import RAYJOBS, watched
from testkit.ray.figures import FIGURES
from testkit.raycluster import observed, opted_in, raycluster
from testkit.waiting import wait_for

ENTRYPOINT = Path(__file__).with_name("rayjob_entrypoint.py")
TASKS = 2  # workers the entrypoint's tasks hold at once; the quota has room for them
# Head, then each worker, start one at a time and may be retried on a busy machine
# (devstack.ray.runner), and the job waits for all of them.
JOB_TIMEOUT = 420
TEARDOWN_TIMEOUT = 120


def rayjob(name: str, entrypoint: str) -> dict[str, Any]:
    """Opted in, on raycluster()'s autoscaled cluster."""
    return opted_in("RayJob", name, {
        "entrypoint": entrypoint,
        # HTTPMode: the operator itself posts the entrypoint to the head's dashboard
        # (here through devstack's dashboard proxy). The default, K8sJobMode, runs
        # `ray job submit` in a submitter Job's pod, and kwok only pretends to run pods.
        "submissionMode": "HTTPMode",
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": 0,
        "rayClusterSpec": raycluster("unused")["spec"],
    })


def test_a_rayjob_runs_on_autoscaled_workers_and_leaves_nothing(admin, controller, queue, ray_tier,
                                                                 ray_runner, e2e_stack, tmp_path: Path):
    ns = queue(cpu=str(1 + TASKS), memory="100Gi")  # the head and the workers the tasks need
    out = tmp_path / "entrypoint.json"
    jobs = RAYJOBS.path(ns)

    def job() -> dict[str, Any]:
        return admin.get(RAYJOBS.path(ns, "job"))

    def job_state() -> str:
        status = job().get("status") or {}
        keys = ("jobStatus", "jobDeploymentStatus", "message", "dashboardURL")
        pods = admin.get(PODS.path(ns))["items"]
        phases = [(p["metadata"]["name"], p["status"].get("phase")) for p in pods]
        return (f"RayJob status {json.dumps({k: status.get(k) for k in keys})}; pods {phases}; "
                f"the operator's log ends:\n{tail(Path(e2e_stack.procs['ray-operator'].log), 15)}")

    def finished() -> dict[str, Any] | None:
        ray_tier.check()
        status = job().get("status") or {}
        if status.get("jobDeploymentStatus") in ("Complete", "Failed"):
            return status
        return None

    def nothing_left() -> bool:
        ours = [x for x in admin.get(WORKLOADS.path(ns))["items"] if w.is_ours(x)]
        return not ours and not admin.get(PODS.path(ns))["items"] and not admin.get(
            RAYCLUSTERS.path(ns))["items"]

    with watched(admin, ns), observed(admin, ns) as seen:
        created = time.time()
        admin.create(jobs, rayjob("job", f"python {ENTRYPOINT} {TASKS} {out}"))
        cluster = wait_for(lambda: (job().get("status") or {}).get("rayClusterName"), timeout=60,
                           message=job_state)
        runner = ray_runner(ns, cluster)
        status = wait_for(finished, timeout=JOB_TIMEOUT, interval=1, message=job_state,
                          fatal=(RayProcessError,))
        succeeded = time.time()
        wait_for(nothing_left, timeout=TEARDOWN_TIMEOUT, interval=0.5,
                 message=lambda: f"the cluster, its pods and Workloads gone; {job_state()}")
        gone = time.time()
        wait_for(lambda: runner.heads_stopped == 1 and not runner.stopping, timeout=60,
                 message="the Ray head stopped with its pod")
    assert (status["jobStatus"], status["jobDeploymentStatus"]) == ("SUCCEEDED", "Complete"), job_state()

    # Every Ray pod was created gated, got a Workload of its own admitted, and only then ran.
    assert seen.pods_ran, "no Ray pod ever ran"
    assert seen.pods_ran <= seen.created_gated, seen.pod_names
    assert seen.pods_ran <= seen.admitted_pods, seen.pod_names
    assert seen.max_workers_running == TASKS  # the quota, never more
    assert seen.churn()["workloads_deleted"] == seen.churn()["workloads_created"]

    # Ray's view, from the entrypoint: each task held a worker of its own, each a pod that ran.
    ray_seen = json.loads(out.read_text())
    ran = {seen.pod_names[uid] for uid in seen.pods_ran}
    assert len(set(ray_seen["results"])) == TASKS and set(ray_seen["results"]) <= ran, ray_seen
    joined = {n["pod"] for n in ray_seen["nodes"] if n["alive"] and n["cpus"] > 0}
    assert set(ray_seen["results"]) <= joined, ray_seen
    assert not ray_tier.watched.off_loopback, ray_tier.watched.off_loopback

    FIGURES["rayjob_create_to_workers_joined_s"] = round(ray_seen["all_joined_at"] - created, 1)
    FIGURES["rayjob_create_to_succeeded_s"] = round(succeeded - created, 1)
    FIGURES["rayjob_create_to_last_workload_gone_s"] = round(gone - created, 1)
