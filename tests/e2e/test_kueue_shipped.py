"""raykueue beside Kueue as users install it: its Ray and pod integrations on, its webhooks registered.

The e2e stack runs Kueue v0.19.2 with the frameworks of its own
controller_manager_config.yaml and its own webhook configurations (devstack).
Opted-in clusters must be raykueue's alone, every other object Kueue's exactly as
before. `Invariants` watches each namespace for the whole test (docs/KUEUE.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube.resources import MUTATING_WEBHOOK_CONFIGURATIONS
from raykueue.kube.rest import Rest
from testkit.e2e.controller import (  # noqa: F401 - fixtures
    RAYCLUSTERS,
    WORKLOADS,
    admin,
    controller,
    cq_cpu_reaches,
    describe,
    pods,
    queue,
    raycluster,
    settled,
    webhooks,
)
from testkit.e2e.kueue_shipped import (
    JOBS,
    RAYJOBS,
    RAYSERVICES,
    _owned_cluster,
    kueue_as_shipped,  # noqa: F401 - autouse fixtures
    no_kueue_workload_for,
    opted_in_cluster,
    raykueue_runs_it,
    watched,
)
from testkit.pods import gated, running
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.waiting import wait_for


def test_a_cluster_opted_in_as_the_readme_says_is_raykueues(admin, controller, queue):  # noqa: F811
    ns = queue(cpu="4", memory="4Gi")
    with watched(admin, ns):
        admin.create(RAYCLUSTERS.path(ns), opted_in_cluster("rc", 4))
        stored = admin.get(RAYCLUSTERS.path(ns, "rc"))
        assert stored["metadata"]["annotations"][c.QUEUE_ANNOTATION] == "team-a"
        assert not stored["spec"].get("suspend")
        raykueue_runs_it(admin, ns, "rc", 3, 1, "team-a")
        no_kueue_workload_for(admin, ns, "RayCluster", "rc")
        cq_cpu_reaches(admin, ns, 4000)


def test_no_queue_in_a_namespace_with_a_default_local_queue(admin, controller, queue):  # noqa: F811
    ns = queue(cpu="3", memory="3Gi", local_queue="default")
    with watched(admin, ns):
        admin.create(RAYCLUSTERS.path(ns), opted_in_cluster("rc", 2, queue_label=False))
        stored = admin.get(RAYCLUSTERS.path(ns, "rc"))
        # Kueue's webhook defaulted the queue and suspended it; raykueue's last webhook undid both.
        assert c.QUEUE_LABEL not in (stored["metadata"].get("labels") or {})
        assert not stored["spec"].get("suspend")
        raykueue_runs_it(admin, ns, "rc", 2, 0, "default")
        no_kueue_workload_for(admin, ns, "RayCluster", "rc")
        cq_cpu_reaches(admin, ns, 3000)


def _cluster_spec(workers: int) -> dict[str, Any]:
    return raycluster("x", workers)["spec"]


def test_a_rayjob_opted_in_runs_its_cluster_pod_by_pod(admin, controller, queue):  # noqa: F811
    # The head's quota covers KubeRay's submitter container too (SidecarMode: 500m).
    ns = queue(cpu="3500m", memory="4Gi")
    with watched(admin, ns):
        admin.create(RAYJOBS.path(ns), {
            "apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": "job", "labels": {c.QUEUE_LABEL: "team-a"},
                         "annotations": {c.STANDALONE_ANNOTATION: "true"}},
            # SidecarMode: the submitter runs in the head pod, counted in its Workload
            # (K8sJobMode: tests/e2e/test_rayjob_submitter.py).
            "spec": {"entrypoint": "python -c 'print(1)'", "rayClusterSpec": _cluster_spec(2),
                     "submissionMode": "SidecarMode", "shutdownAfterJobFinishes": True}})
        job = admin.get(RAYJOBS.path(ns, "job"))
        assert not job["spec"].get("suspend") and c.QUEUE_LABEL not in (job["metadata"].get("labels") or {})
        cluster = _owned_cluster(admin, ns, "RayJob", "job")
        raykueue_runs_it(admin, ns, cluster, 2, 0, "team-a")
        no_kueue_workload_for(admin, ns, "RayJob", "job")
        no_kueue_workload_for(admin, ns, "RayCluster", cluster)
        admin.delete(RAYJOBS.path(ns, "job"))
        wait_for(lambda: not [x for x in admin.get(WORKLOADS.path(ns))["items"] if w.is_ours(x)],
                 timeout=120, message="every raykueue Workload gone with the RayJob")


def test_a_rayservice_opted_in_runs_its_cluster_pod_by_pod(admin, controller, queue):  # noqa: F811
    ns = queue(cpu="3", memory="3Gi", local_queue="default")
    with watched(admin, ns):
        admin.create(RAYSERVICES.path(ns), {
            "apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": "svc", "annotations": {c.STANDALONE_ANNOTATION: "true"}},
            "spec": {"rayClusterConfig": _cluster_spec(2)}})
        svc = admin.get(RAYSERVICES.path(ns, "svc"))
        assert not svc["spec"]["rayClusterConfig"].get("suspend")
        cluster = _owned_cluster(admin, ns, "RayService", "svc")
        raykueue_runs_it(admin, ns, cluster, 2, 0, "default")
        no_kueue_workload_for(admin, ns, "RayService", "svc")


KUEUE_MUTATING = "kueue-mutating-webhook-configuration"


def webhook_calls(stack, name: str) -> float:
    """How many times the API server has called the mutating webhook `name` (its own metric)."""
    out = stack.kubectl("get", "--raw", "/metrics")
    assert out.returncode == 0, out.stderr
    return sum(float(line.rsplit(" ", 1)[1]) for line in out.stdout.splitlines()
               if line.startswith("apiserver_admission_webhook_request_total{")
               and f'name="{name}"' in line and 'type="admit"' in line)


def set_reinvocation(admin: Rest, config: str, policy: str, only: str | None = None) -> None:  # noqa: F811
    path = MUTATING_WEBHOOK_CONFIGURATIONS.path(name=config)
    hooks = admin.get(path)["webhooks"]
    admin.json_patch(path, [{"op": "add", "path": f"/webhooks/{i}/reinvocationPolicy", "value": policy}
                            for i, hook in enumerate(hooks) if only in (None, hook["name"])])


@contextlib.contextmanager
def kueue_reinvoked(admin: Rest, stack, ns: str) -> Iterator[None]:  # noqa: F811
    """Kueue's mutating webhooks as its Helm chart sets them with
    `mutatingWebhook.reinvocationPolicy: IfNeeded`, until the block ends."""
    set_reinvocation(admin, KUEUE_MUTATING, "IfNeeded")

    def reinvoked() -> bool:
        # raykueue's last stage changes the object, so a reinvocable Kueue
        # webhook is called twice for one creation once the API server has it.
        before = webhook_calls(stack, "mraycluster.kb.io")
        admin.create(RAYCLUSTERS.path(ns), opted_in_cluster("probe", 0, queue_label=False),
                     query={"dryRun": "All"})
        return webhook_calls(stack, "mraycluster.kb.io") - before == 2

    try:
        wait_for(reinvoked, timeout=30, message="the API server to reinvoke Kueue's Ray webhook")
        yield
    finally:
        set_reinvocation(admin, KUEUE_MUTATING, "Never")


def test_opted_in_clusters_stay_raykueues_when_kueues_webhooks_are_reinvoked(
        admin, controller, queue, e2e_stack):  # noqa: F811
    """Kueue's Ray and pod webhooks reinvoked after ours put the default queue, the
    suspend and their pod gate back; ours, IfNeeded too, are reinvoked after them."""
    ns = queue(cpu="3", memory="3Gi", local_queue="default")
    with kueue_reinvoked(admin, e2e_stack, ns), watched(admin, ns):
        admin.create(RAYCLUSTERS.path(ns), opted_in_cluster("rc", 2, queue_label=False))
        stored = admin.get(RAYCLUSTERS.path(ns, "rc"))
        assert c.QUEUE_LABEL not in (stored["metadata"].get("labels") or {})
        assert not stored["spec"].get("suspend")
        raykueue_runs_it(admin, ns, "rc", 2, 0, "default")
        no_kueue_workload_for(admin, ns, "RayCluster", "rc")


def test_why_the_last_stage_is_reinvoked_too(admin, webhooks, queue, e2e_stack):  # noqa: F811
    """The API server reinvokes only IfNeeded webhooks (k8s.io/apiserver mutating
    dispatcher): with raykueue's last stage Never, a reinvoked Kueue has the last word."""
    ns = queue(cpu="1", memory="1Gi", local_queue="default")
    set_reinvocation(admin, c.MUTATING_WEBHOOK_CONFIG, "Never", only="last-ray-objects.raykueue.io")
    try:
        with kueue_reinvoked(admin, e2e_stack, ns):
            def kueues() -> dict[str, Any] | None:
                obj = admin.create(RAYCLUSTERS.path(ns), opted_in_cluster("rc", 0, queue_label=False),
                                   query={"dryRun": "All"})
                return obj if obj["spec"].get("suspend") else None

            taken = wait_for(kueues, timeout=30, message="a reinvoked Kueue to suspend the cluster")
            assert taken["metadata"]["labels"][c.QUEUE_LABEL] == c.DEFAULT_LOCAL_QUEUE
    finally:
        set_reinvocation(admin, c.MUTATING_WEBHOOK_CONFIG, "IfNeeded", only="last-ray-objects.raykueue.io")


def test_objects_not_opted_in_stay_kueues_exactly_as_before(admin, controller, queue):  # noqa: F811
    """A RayCluster, a RayJob and a plain Job beside an opted-in cluster, in the same namespace."""
    ns = queue(cpu="20", memory="20Gi")
    with watched(admin, ns):
        admin.create(RAYCLUSTERS.path(ns), opted_in_cluster("mine", 1))
        theirs = raycluster("theirs", 1)
        theirs["metadata"]["annotations"] = {}
        admin.create(RAYCLUSTERS.path(ns), theirs)
        admin.create(RAYJOBS.path(ns), {
            "apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": "their-job", "labels": {c.QUEUE_LABEL: "team-a"}},
            # Kueue's validating webhook requires this of the RayJobs it manages.
            "spec": {"entrypoint": "python -c 'print(1)'", "rayClusterSpec": _cluster_spec(1),
                     "shutdownAfterJobFinishes": True}})
        admin.create(JOBS.path(ns), {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "plain", "labels": {c.QUEUE_LABEL: "team-a"}},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "c", "image": "busybox",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}}})
        for kind, name, res in (("RayCluster", "theirs", RAYCLUSTERS), ("RayJob", "their-job", RAYJOBS),
                                ("Job", "plain", JOBS)):
            obj = admin.get(res.path(ns, name))
            # Kueue's webhook suspended it on the way in (Kueue unsuspends it once admitted).
            assert obj["metadata"]["labels"][c.QUEUE_LABEL] == "team-a"

            def kueues(kind: str = kind, name: str = name) -> dict[str, Any] | None:
                for wl in admin.get(WORKLOADS.path(ns))["items"]:
                    refs = wl["metadata"].get("ownerReferences") or []
                    if any((r_["kind"], r_["name"]) == (kind, name) for r_ in refs) and w.is_admitted(wl):
                        return wl
                return None

            wl = wait_for(kueues, timeout=120, message=f"Kueue's admitted Workload for {kind} {name}")
            assert not w.is_ours(wl)
        # The pods of Kueue's RayCluster run under Kueue's Workload: raykueue left them alone.
        theirs_pods = wait_for(lambda: [p for p in pods(admin, ns, "theirs") if running(p)], timeout=120,
                               message="Kueue's RayCluster running")
        for p in theirs_pods:
            assert c.MANAGED_BY_LABEL not in p["metadata"]["labels"] and not gated(p)
        raykueue_runs_it(admin, ns, "mine", 1, 0, "team-a")


def test_soak_200_pod_creations_and_deletions(admin, controller, queue):  # noqa: F811
    """Two opted-in clusters scaled up and down, as an autoscaler would, ten times each."""
    ns = queue(cpu="30", memory="30Gi")
    rounds, workers = 10, 10
    with watched(admin, ns) as inv:
        for name in ("a", "b"):
            admin.create(RAYCLUSTERS.path(ns), opted_in_cluster(name, 0))
        for _ in range(rounds):
            for replicas in (workers, 0):
                for name in ("a", "b"):
                    spec = raycluster(name, replicas)["spec"]["workerGroupSpecs"]
                    admin.merge_patch(RAYCLUSTERS.path(ns, name), {"spec": {"workerGroupSpecs": spec}})
                for name in ("a", "b"):
                    wait_for(settled(admin, ns, name, replicas, 0), timeout=180,
                             message=describe(admin, ns, name))
        cq_cpu_reaches(admin, ns, 2000)  # the two heads
    created = inv.counts["pods added"] - 2  # heads
    assert created >= 2 * rounds * workers, inv.counts
    assert inv.counts["pods deleted"] >= 2 * rounds * workers, inv.counts
    print(f"\n[soak] {dict(inv.counts)}")
