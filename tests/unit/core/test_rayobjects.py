"""core/rayobjects.py and core/priority.py: the one place each Ray-object and priority rule is read."""

from __future__ import annotations

from typing import Any

import pytest

from raykueue.core import contract as c
from raykueue.core import priority as pr
from raykueue.core import rayobjects as ro


def template(**labels: str) -> dict[str, Any]:
    return {"metadata": {"labels": dict(labels)}, "spec": {"containers": []}}


def cluster_spec(*groups: tuple[str, int, int | None]) -> dict[str, Any]:
    return {"headGroupSpec": {"template": template()},
            "workerGroupSpecs": [{"groupName": name, "minReplicas": n, "template": template(),
                                  **({"numOfHosts": hosts} if hosts is not None else {})}
                                 for name, n, hosts in groups]}


@pytest.mark.parametrize(("kind", "at"), [("RayCluster", ("spec",)),
                                          ("RayJob", ("spec", "rayClusterSpec")),
                                          ("RayService", ("spec", "rayClusterConfig"))])
def test_templates_are_found_where_each_kind_keeps_them(kind: str, at: tuple[str, ...]) -> None:
    obj: dict[str, Any] = {"kind": kind}
    node = obj
    for part in at[:-1]:
        node = node.setdefault(part, {})
    node[at[-1]] = cluster_spec(("a", 1, None), ("b", 2, 2))
    paths = [path for path, _ in ro.templates(obj)]
    assert paths == [(*at, "headGroupSpec", "template"), (*at, "workerGroupSpecs", "0", "template"),
                     (*at, "workerGroupSpecs", "1", "template")]
    assert ro.is_head_template(paths[0]) and not ro.is_head_template(paths[1])
    # A list's items carry no kind: the caller names it.
    del obj["kind"]
    assert list(ro.templates(obj)) == []
    assert len(list(ro.templates(obj, kind))) == 3


def test_a_rayservice_suspend_is_its_next_clusters() -> None:
    service = {"kind": "RayService", "spec": {"rayClusterConfig": {"suspend": True}}}
    assert ro.is_suspended(service)
    assert not ro.is_suspended({"kind": "RayService", "spec": {"suspend": True}})
    assert ro.is_suspended({"spec": {"suspend": True}}, "RayJob")
    assert not ro.is_suspended(None) and not ro.is_suspended({"kind": "Pod", "spec": {"suspend": True}})


def test_the_opt_in_is_the_objects_own_annotation_and_true_only() -> None:
    def obj(value: str | None) -> dict[str, Any]:
        return {"metadata": {"annotations": {} if value is None else {c.STANDALONE_ANNOTATION: value}}}
    assert ro.is_opted_in(obj("true"))
    assert not any(ro.is_opted_in(obj(v)) for v in ("True", "false", "", None))
    assert ro.opt_in_value(obj("yes")) == "yes" and ro.opt_in_value(None) is None
    on_template = {"metadata": {"annotations": {c.STANDALONE_ANNOTATION: "true"}}}
    assert ro.template_opt_in(on_template) == "true" and not ro.is_opted_in({"spec": on_template})


def test_kueue_admits_whole_what_carries_its_queue_label() -> None:
    assert ro.admitted_whole({"metadata": {"labels": {c.QUEUE_LABEL: "q"}}})
    assert not ro.admitted_whole({"metadata": {"labels": {c.QUEUE_LABEL: ""}}})
    assert not ro.admitted_whole({"metadata": {"annotations": {c.QUEUE_ANNOTATION: "q"}}})
    assert not ro.admitted_whole(None)


def test_group_minimums_are_min_replicas_times_hosts() -> None:
    rc = {"spec": cluster_spec(("cpu", 3, None), ("tpu", 2, 4), ("idle", 0, 8))}
    rc["spec"]["workerGroupSpecs"].append({"minReplicas": 5})  # no name: not a group KubeRay makes
    rc["spec"]["workerGroupSpecs"].append({"groupName": "odd", "minReplicas": -1, "numOfHosts": "2"})
    assert ro.group_minimums(rc) == {"cpu": 3, "tpu": 8, "idle": 0, "odd": 0}
    assert ro.group_minimums(None) == {} and ro.group_minimums({"spec": {}}) == {}


def test_the_ray_owner_is_the_controller_reference_into_ray_io() -> None:
    def owned(api: str, kind: str, controller: bool = True) -> dict[str, Any]:
        return {"metadata": {"ownerReferences": [{"apiVersion": api, "kind": kind, "name": "x",
                                                  "uid": "u", "controller": controller}]}}
    assert ro.ray_owner(owned("ray.io/v1", "RayCluster")) == ("RayCluster", "x")
    assert ro.ray_owner(owned("ray.io/v1", "RayJob")) == ("RayJob", "x")
    assert ro.ray_owner(owned("ray.io/v1", "RayCluster", controller=False)) is None
    assert ro.ray_owner(owned("notray.io/v1", "RayCluster")) is None
    assert ro.ray_owner(owned("ray.io/v1", "RayNode")) is None
    assert ro.ray_owner_ref(owned("ray.io/v1", "RayNode")) is not None


def test_the_one_raycluster_cache_transform_keeps_what_is_read_of_it() -> None:
    rc = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
          "metadata": {"name": "rc", "namespace": "n", "uid": "u", "managedFields": [{}],
                       "annotations": {c.STANDALONE_ANNOTATION: "true", c.GANG_ANNOTATION: "true"}},
          "spec": cluster_spec(("tpu", 2, 4), ("cpu", 1, None))}
    rc["spec"]["workerGroupSpecs"][0]["scaleStrategy"] = {"workersToDelete": ["rc-tpu-1"]}
    slim = ro.slim_raycluster(rc)
    assert "managedFields" not in slim["metadata"] and "headGroupSpec" not in slim["spec"]
    assert ro.is_opted_in(slim) and slim["kind"] == "RayCluster" and slim["apiVersion"] == "ray.io/v1"
    assert ro.group_minimums(slim) == ro.group_minimums(rc) == {"tpu": 8, "cpu": 1}
    assert ro.workers_to_delete(slim) == ro.workers_to_delete(rc) == {"rc-tpu-1"}
    assert "scaleStrategy" not in slim["spec"]["workerGroupSpecs"][1]
    # A list's item carries no kind; the cache's copy does.
    assert ro.slim_raycluster({"metadata": {"name": "rc"}})["kind"] == "RayCluster"


# --- priority --------------------------------------------------------------------------


def test_the_policy_says_which_classes_are_head_only_and_what_cannot_work() -> None:
    assert pr.PriorityPolicy().head_only_classes == {c.DEFAULT_HEAD_PRIORITY_CLASS}
    assert pr.PriorityPolicy("gold").head_only_classes == {"gold"}
    assert pr.PriorityPolicy(head_only_priority_classes=frozenset({"a", "b"})).head_only_classes == {"a", "b"}
    assert pr.PriorityPolicy().problem() is None
    problem = pr.PriorityPolicy(worker_priority_class=c.DEFAULT_HEAD_PRIORITY_CLASS).problem()
    assert problem is not None and "every worker would be denied" in problem


def test_a_worker_group_newly_naming_a_head_only_class_is_refused() -> None:
    def rc(cls: str | None) -> dict[str, Any]:
        spec = cluster_spec(("gpu", 1, None))
        if cls:
            spec["workerGroupSpecs"][0]["template"]["metadata"]["labels"][c.PRIORITY_CLASS_LABEL] = cls
        return {"kind": "RayCluster", "metadata": {"name": "rc"}, "spec": spec}
    policy = pr.PriorityPolicy()
    message = pr.head_class_on_a_worker(rc(c.DEFAULT_HEAD_PRIORITY_CLASS), None, policy)
    assert message is not None and "worker group gpu" in message
    assert pr.head_class_on_a_worker(rc("batch"), None, policy) is None
    # Already there before the update: not new, so an unrelated update goes through.
    old = rc(c.DEFAULT_HEAD_PRIORITY_CLASS)
    assert pr.head_class_on_a_worker(rc(c.DEFAULT_HEAD_PRIORITY_CLASS), old, policy) is None


def test_a_workload_class_value_or_why_there_is_none() -> None:
    values = {"ray-head": 1000}
    assert pr.workload_priority(None, values, "p") is None
    assert pr.workload_priority("ray-head", values, "p") == ("ray-head", 1000)
    missing = pr.workload_priority("gold", values, "ns/p")
    assert isinstance(missing, pr.Missing) and "'gold' of pod ns/p does not exist" in missing.message
    assert missing.waiting == "WorkloadPriorityClass gold missing"


def test_the_pod_priority_class_is_set_only_when_asked_and_known() -> None:
    on = pr.PriorityPolicy(pod_priority=pr.PodPriority())
    known = {c.DEFAULT_HEAD_POD_PRIORITY_CLASS: 10, c.DEFAULT_WORKER_POD_PRIORITY_CLASS: 1}
    assert pr.pod_priority_class(pr.PriorityPolicy(), c.ROLE_HEAD, {}, known) == (None, ())
    assert pr.pod_priority_class(on, c.ROLE_HEAD, {}, known) == ((c.DEFAULT_HEAD_POD_PRIORITY_CLASS, 10), ())
    assert pr.pod_priority_class(on, c.ROLE_WORKER, {"priorityClassName": "mine"}, known) == (None, ())
    value, (warning,) = pr.pod_priority_class(on, c.ROLE_WORKER, {}, {})
    assert value is None and "not known to raykueue" in warning
