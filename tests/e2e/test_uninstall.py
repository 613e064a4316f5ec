"""`raykueue uninstall`, the way out, beside Kueue as shipped (issue 20, item 4).

An admin runs it with a kubeconfig, as `raykueue uninstall [--handback] [--yes]`;
its plan, order and reasons are in raykueue/uninstall/plan.py. Afterwards no pod is
gated by raykueue, no raykueue Workload is left, no webhook of raykueue's is
registered, no pod runs outside quota (testkit/quota_invariants.py watches the
whole scenario), and the opted-in clusters are either Kueue's, admitted whole
(--handback), or suspended and left so.

Two situations the old recovery (remove the webhooks, then delete gated pods) got
wrong are set up on purpose: a gated worker whose Workload Kueue admitted while
the controller was away (it held quota for a pod that never ran), and gated pods
that KubeRay would recreate ungated, outside quota, once the webhooks are gone.
"""

from __future__ import annotations

from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube.rest import Rest
from raykueue.webhooks.autoscaler_env import ALLOCATE_TIMEOUT_ENV
from testkit.e2e.controller import admin, cq_cpu_reaches, queue  # noqa: F401 - fixtures
from testkit.e2e.uninstall import alone_on_the_stack, handed_to_kueue, raykueue_webhooks, settled_ours
from testkit.outage import (  # noqa: F401 - fixtures
    Raykueue,
    clusters_of,
    kueue_workload,
    pods_of,
    ray_object,
    ray_pods,
    raykueue,
    raykueue_cli,
    raykueue_workloads,
    runs,
    untouched_by_raykueue,
)
from testkit.quota_invariants import RAY, QuotaInvariants, gated_by_raykueue, running
from testkit.waiting import holds_for

RC, JOB, SVC = c.RAYCLUSTER_KIND, c.RAYJOB_KIND, c.RAYSERVICE_KIND


def describe(admin: Rest, ns: str) -> str:  # noqa: F811
    pods = [(p["metadata"]["name"], p["metadata"]["uid"][:8], p["status"].get("phase"),
             [g["name"] for g in p["spec"].get("schedulingGates") or []]) for p in ray_pods(admin, ns)]
    wls = [(x["metadata"]["name"], (w.pod_uid_of(x) or "")[:8], w.is_admitted(x), w.is_finished(x),
            bool(x["metadata"].get("deletionTimestamp")))
           for x in admin.get(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads")["items"]]
    return f"pods {pods}; workloads {wls}"


def test_uninstall_with_handback_leaves_nothing_and_kueue_admits_each_cluster_whole(
        admin, raykueue: Raykueue, e2e_stack, queue) -> None:  # noqa: F811
    # auto: head 1 + its autoscaler sidecar 0.1 + 2 workers; job: head + 1 worker; fixed: head +
    # 1 worker, a second one waiting. 7.1 cpus hold exactly the three whole clusters.
    ns = queue(cpu="7100m", memory="64Gi")
    cq = f"e2e-{ns}"
    alone_on_the_stack(admin, ns)
    with QuotaInvariants(admin, [ns], quota_namespaces=[ns], cluster_queues=[cq]) as inv:
        admin.create(RAY[RC].path(ns), ray_object(RC, "auto", 2, opted_in=True, queue="team-a", cpu="1",
                                                  autoscaling=True))
        admin.create(RAY[JOB].path(ns), ray_object(JOB, "job", 1, opted_in=True, queue="team-a", cpu="1"))
        inv.wait(lambda: settled_ours(admin, ns, "auto", 2, 0), timeout=120, message="auto admitted")
        job_cluster = inv.wait(lambda: (found := clusters_of(admin, ns, JOB, "job")) and found[0],
                               timeout=60, message="the RayJob's RayCluster")["metadata"]["name"]
        inv.wait(lambda: settled_ours(admin, ns, job_cluster, 1, 0), timeout=120, message="job admitted")
        admin.create(RAY[RC].path(ns), ray_object(RC, "fixed", 2, opted_in=True, queue="team-a", cpu="1"))
        s = inv.wait(lambda: settled_ours(admin, ns, "fixed", 1, 1), timeout=120,
                     message="fixed: head and one worker Running, one waiting for quota")

        # The controller goes away; the autoscaler gives back the running worker. Its
        # Workload goes with it (the garbage collector), Kueue admits the waiting one's,
        # and with no controller to lift its gate that pod holds quota it never uses.
        raykueue.controller.stop()
        (worker,) = [p for p in s["pods"] if p["metadata"]["labels"][c.NODE_TYPE_LABEL] == "worker"
                     and running(p)]
        (waiting,) = [p for p in s["pods"] if gated_by_raykueue(p)]
        admin.json_patch(RAY[RC].path(ns, "fixed"), [  # the autoscaler's scale-down patch
            {"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 1},
            {"op": "add", "path": "/spec/workerGroupSpecs/0/scaleStrategy",
             "value": {"workersToDelete": [worker["metadata"]["name"]]}}])

        def stuck() -> bool:
            uid = waiting["metadata"]["uid"]
            wls = [x for x in raykueue_workloads(admin, ns) if w.pod_uid_of(x) == uid]
            pod = [p for p in pods_of(admin, ns, "fixed") if p["metadata"]["uid"] == uid]
            return len(wls) == 1 and w.is_admitted(wls[0]) and len(pod) == 1 and gated_by_raykueue(pod[0])

        inv.wait(stuck, timeout=120, message=lambda: "the waiting worker's Workload admitted, its pod "
                 f"still gated: {describe(admin, ns)}")
        cq_cpu_reaches(admin, ns, 7100)  # held in full, a worker's worth by a pod that cannot run

        registered = raykueue_webhooks(admin)
        assert registered
        plan = raykueue_cli(e2e_stack, "uninstall", "--handback")
        assert plan.returncode == 0, plan.stdout + plan.stderr
        for ref in (f"RayCluster {ns}/auto", f"RayCluster {ns}/fixed; 2 pods (1 gated)", f"RayJob {ns}/job"):
            assert ref in plan.stdout
        assert f"RayCluster {ns}/fixed -> LocalQueue team-a" in plan.stdout
        # A dry run changes nothing.
        assert raykueue_webhooks(admin) == registered
        assert not any(admin.get(RAY[k].path(ns, n))["spec"].get("suspend")
                       for k, n in ((RC, "auto"), (RC, "fixed"), (JOB, "job")))

        done = raykueue_cli(e2e_stack, "uninstall", "--handback", "--yes")
        assert done.returncode == 0, done.stdout + done.stderr
        assert raykueue_webhooks(admin) == []
        assert raykueue_workloads(admin, ns) == []
        auto = handed_to_kueue(admin, ns, RC, "auto", "team-a")
        # Kueue takes an autoscaled cluster only as an elastic job.
        assert auto["metadata"]["annotations"][c.KUEUE_ELASTIC_JOB_ANNOTATION] == "true"
        assert auto["spec"]["enableInTreeAutoscaling"] is True
        handed_to_kueue(admin, ns, RC, "fixed", "team-a")
        handed_to_kueue(admin, ns, JOB, "job", "team-a")
        for kind, name, workers in ((RC, "auto", 2), (RC, "fixed", 1), (JOB, "job", 1)):
            inv.wait(lambda kind=kind, name=name: (x := kueue_workload(admin, ns, kind, name))
                     and w.is_admitted(x), timeout=120, message=f"Kueue to admit {kind} {name} whole")
            pods = inv.wait(runs(admin, ns, kind, name, workers), timeout=180,
                            message=f"{kind} {name} Running under Kueue")
            assert all(untouched_by_raykueue(p) for p in pods)
        assert not any(gated_by_raykueue(p) for p in ray_pods(admin, ns))
        cq_cpu_reaches(admin, ns, 7100)  # the three clusters whole: nothing of raykueue's holds quota
        inv.sweep()
    inv.raise_if_broken()


def test_uninstall_is_blocked_by_a_rayservice_then_parks_and_hands_back_later(
        admin, raykueue: Raykueue, e2e_stack, queue) -> None:  # noqa: F811
    # The RayService's head and the cluster's head: its worker waits for quota.
    ns = queue(cpu="2", memory="64Gi")
    cq = f"e2e-{ns}"
    alone_on_the_stack(admin, ns)
    with QuotaInvariants(admin, [ns], quota_namespaces=[ns], cluster_queues=[cq]) as inv:
        admin.create(RAY[SVC].path(ns), ray_object(SVC, "svc", 0, opted_in=True, queue="team-a", cpu="1"))
        svc_cluster = inv.wait(lambda: (found := clusters_of(admin, ns, SVC, "svc")) and found[0],
                               timeout=60, message="the RayService's RayCluster")["metadata"]["name"]
        inv.wait(lambda: settled_ours(admin, ns, svc_cluster, 0, 0), timeout=120, message="svc admitted")
        admin.create(RAY[RC].path(ns), ray_object(RC, "rc", 1, opted_in=True, queue="team-a", cpu="1"))
        inv.wait(lambda: settled_ours(admin, ns, "rc", 0, 1), timeout=120,
                 message="rc: head Running, its worker waiting for quota")

        registered = raykueue_webhooks(admin)
        blocked = raykueue_cli(e2e_stack, "uninstall", "--yes")
        assert blocked.returncode == 3, blocked.stdout + blocked.stderr
        assert f"RayService {ns}/svc: KubeRay cannot suspend a RayService in place" in blocked.stdout
        assert raykueue_webhooks(admin) == registered  # nothing done
        assert not admin.get(RAY[RC].path(ns, "rc"))["spec"].get("suspend")

        # The owner's choice: the service goes.
        admin.delete(RAY[SVC].path(ns, "svc"))
        inv.wait(lambda: not pods_of(admin, ns, svc_cluster), timeout=120, message="the service's pods gone")

        parked = raykueue_cli(e2e_stack, "uninstall", "--yes")
        assert parked.returncode == 0, parked.stdout + parked.stderr
        assert f"RayCluster {ns}/rc: left suspended" in parked.stdout
        assert raykueue_webhooks(admin) == [] and raykueue_workloads(admin, ns) == []
        rc = admin.get(RAY[RC].path(ns, "rc"))
        assert rc["spec"]["suspend"] is True
        assert rc["metadata"]["annotations"][c.SUSPENDED_BY_ANNOTATION] == c.SUSPENDED_BY_UNINSTALL
        assert rc["metadata"]["annotations"][c.STANDALONE_ANNOTATION] == "true"  # still opted in
        # With raykueue's webhooks gone, a cluster that were not suspended would get its
        # pods back ungated, outside quota: this one stays down.
        assert holds_for(lambda: not pods_of(admin, ns, "rc"), seconds=5)
        cq_cpu_reaches(admin, ns, 0)

        # Later, with raykueue gone, its owner wants it run under Kueue.
        back = raykueue_cli(e2e_stack, "uninstall", "--yes", "--handback")
        assert back.returncode == 0, back.stdout + back.stderr
        handed_to_kueue(admin, ns, RC, "rc", "team-a")
        inv.wait(lambda: (x := kueue_workload(admin, ns, RC, "rc")) and w.is_admitted(x), timeout=120,
                 message="Kueue to admit rc whole")
        pods = inv.wait(runs(admin, ns, RC, "rc", 1), timeout=180, message="rc Running under Kueue")
        assert all(untouched_by_raykueue(p) for p in pods)
        cq_cpu_reaches(admin, ns, 2000)
        inv.sweep()
    inv.raise_if_broken()


def test_an_owner_hands_one_autoscaled_cluster_back_to_kueue_while_raykueue_stays(
        admin, raykueue: Raykueue, e2e_stack, queue) -> None:  # noqa: F811
    # head 1 + its autoscaler sidecar 0.1 + a worker: Kueue must admit exactly what raykueue held.
    ns = queue(cpu="2100m", memory="64Gi")
    with QuotaInvariants(admin, [ns], quota_namespaces=[ns], cluster_queues=[f"e2e-{ns}"]) as inv:
        admin.create(RAY[RC].path(ns), ray_object(RC, "mine", 1, opted_in=True, queue="team-a", cpu="1",
                                                  autoscaling=True))
        inv.wait(lambda: settled_ours(admin, ns, "mine", 1, 0), timeout=120, message="mine admitted")
        registered = raykueue_webhooks(admin)

        plan = raykueue_cli(e2e_stack, "handback", "raycluster", "mine", "-n", ns)
        assert plan.returncode == 0 and "LocalQueue team-a" in plan.stdout, plan.stdout + plan.stderr
        assert not admin.get(RAY[RC].path(ns, "mine"))["spec"].get("suspend")  # a dry run

        done = raykueue_cli(e2e_stack, "handback", "raycluster", "mine", "-n", ns, "--yes")
        assert done.returncode == 0, done.stdout + done.stderr
        mine = handed_to_kueue(admin, ns, RC, "mine", "team-a")
        # Ray's own allocate timeout again: Kueue admits it whole, no pod waits for quota
        # (issue 28; raykueue's first webhook, still installed, does not put it back).
        assert ALLOCATE_TIMEOUT_ENV not in [e.get("name") for e in mine["spec"]["autoscalerOptions"]["env"]]
        inv.wait(lambda: (x := kueue_workload(admin, ns, RC, "mine")) and w.is_admitted(x), timeout=120,
                 message="Kueue to admit mine whole")
        pods = inv.wait(runs(admin, ns, RC, "mine", 1), timeout=180, message="mine Running under Kueue")
        # raykueue stays for everyone else, and leaves this cluster alone from now on.
        assert all(untouched_by_raykueue(p) for p in pods)
        assert raykueue_webhooks(admin) == registered and raykueue_workloads(admin, ns) == []
        cq_cpu_reaches(admin, ns, 2100)
        inv.sweep()
    inv.raise_if_broken()
