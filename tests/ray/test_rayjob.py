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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

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


# The submission modes the Ray tier runs, and the quota each costs beyond the cluster's pods:
# - HTTPMode: the operator itself posts the entrypoint to the head's dashboard (here
#   through devstack's dashboard proxy); no pod, nothing more.
# - SidecarMode: KubeRay adds a `ray-job-submitter` container (500m CPU / 200Mi) to
#   the head pod, which runs `ray job submit` against 127.0.0.1; the head's Workload
#   counts it with the head. devstack.ray_submitter runs that container's script.
# - InteractiveMode: KubeRay makes the cluster and waits (Waiting) for spec.jobId; the
#   test submits the job to the head's dashboard itself, as a user would, then sets it.
# K8sJobMode (KubeRay's default) runs `ray job submit` in a batch Job's pod; kwok's
# pod-complete stage ends that pod as soon as it runs, and KubeRay fails a RayJob
# whose submitter finished 30 s before its job did, so the Ray tier cannot run it
# yet (tests/e2e/test_rayjob_submitter.py covers its quota).
MODES = {"HTTPMode": 0, "SidecarMode": 500, "InteractiveMode": 0}  # mode -> millicores beyond the pods


def rayjob(name: str, entrypoint: str, mode: str = "HTTPMode") -> dict[str, Any]:
    """Opted in, on raycluster()'s autoscaled cluster, submitted in `mode` (MODES)."""
    return opted_in("RayJob", name, {
        "entrypoint": entrypoint,
        "submissionMode": mode,
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": 0,
        "rayClusterSpec": raycluster("unused")["spec"],
    })


def submit_interactively(admin, ray_tier, runner, ns: str, entrypoint: str,
                         job_state: Callable[[], str]) -> None:
    """What a user of InteractiveMode does: once KubeRay waits for a job id, submit the
    entrypoint to the head's dashboard under an id of one's own, then set spec.jobId."""
    wait_for(lambda: (ray_tier.check() or runner.head_ready()) and (
        admin.get(RAYJOBS.path(ns, "job")).get("status") or {}).get("jobDeploymentStatus") == "Waiting",
        timeout=JOB_TIMEOUT, interval=1, message=job_state, fatal=(RayProcessError,))
    job_id = "interactive-job"
    submit = ray_tier.spawn("interactive-submit", [
        "ray", "job", "submit", "--address", f"http://127.0.0.1:{runner.dashboard_port}",
        "--submission-id", job_id, "--no-wait", "--", *entrypoint.split()])
    wait_for(lambda: submit.exited() is not None, timeout=120, message="ray job submit to return")
    assert submit.exited() == 0, tail(submit.log, 20)
    admin.merge_patch(RAYJOBS.path(ns, "job"), {"spec": {"jobId": job_id}})


@pytest.mark.parametrize("mode", list(MODES))
def test_a_rayjob_runs_on_autoscaled_workers_and_leaves_nothing(admin, controller, queue, ray_tier,
                                                                 ray_runner, e2e_stack, tmp_path: Path,
                                                                 mode: str):
    # the head (and its submitter, in SidecarMode) and the workers the tasks need
    ns = queue(cpu=f"{(1 + TASKS) * 1000 + MODES[mode]}m", memory="100Gi")
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
        admin.create(jobs, rayjob("job", f"python {ENTRYPOINT} {TASKS} {out}", mode))
        cluster = wait_for(lambda: (job().get("status") or {}).get("rayClusterName"), timeout=60,
                           message=job_state)
        runner = ray_runner(ns, cluster)
        if mode == "InteractiveMode":
            submit_interactively(admin, ray_tier, runner, ns, f"python {ENTRYPOINT} {TASKS} {out}", job_state)
        status = wait_for(finished, timeout=JOB_TIMEOUT, interval=1, message=job_state,
                          fatal=(RayProcessError,))
        succeeded = time.time()
        wait_for(nothing_left, timeout=TEARDOWN_TIMEOUT, interval=0.5,
                 message=lambda: f"the cluster, its pods and Workloads gone; {job_state()}")
        gone = time.time()
        wait_for(lambda: runner.heads_stopped == 1 and not runner.stopping, timeout=60,
                 message="the Ray head stopped with its pod")
    assert (status["jobStatus"], status["jobDeploymentStatus"]) == ("SUCCEEDED", "Complete"), job_state()
    # SidecarMode: submitted by the head pod's submitter container, run once (devstack.ray_submitter).
    assert runner.submitters == (1 if mode == "SidecarMode" else 0)

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

    figures = FIGURES.setdefault(f"rayjob_{mode}", {})
    figures["create_to_workers_joined_s"] = round(ray_seen["all_joined_at"] - created, 1)
    figures["create_to_succeeded_s"] = round(succeeded - created, 1)
    figures["create_to_last_workload_gone_s"] = round(gone - created, 1)
