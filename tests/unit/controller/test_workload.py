"""Building Workloads from pods and reading Workload state, both versions."""

from __future__ import annotations

import re

import pytest

from raykueue.controller import kueue_admission as adm
from raykueue.controller import workload as w
from raykueue.controller import workload_match as wm
from raykueue.controller import workload_status as ws
from raykueue.core import contract as c
from testkit import controller_objects as o

DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


# --- naming ---------------------------------------------------------------------------


def test_name_is_pod_name_plus_uid_hash_and_deterministic():
    pod = o.pod(name="raycluster-gpu-gpu-group-worker-x7k2p", uid="uid-1")
    name = w.workload_name(pod)
    assert name.startswith("raycluster-gpu-gpu-group-worker-x7k2p-")
    assert len(name) == len("raycluster-gpu-gpu-group-worker-x7k2p-") + 8
    assert w.workload_name(o.pod(name="raycluster-gpu-gpu-group-worker-x7k2p", uid="uid-1")) == name


def test_namesake_pod_with_new_uid_gets_another_name():
    first = o.pod(name="raycluster-gpu-head", uid="uid-1")
    second = o.pod(name="raycluster-gpu-head", uid="uid-2")
    assert w.workload_name(first) != w.workload_name(second)


@pytest.mark.parametrize("pod_name", [
    "a" * 253,
    "a" * 243 + "-" + "b" * 9,  # the cut lands right after a '-'
    "a" * 243 + "." + "b" * 9,  # ... or a '.'
    "x",
])
def test_long_names_are_cut_to_a_valid_subdomain(pod_name):
    name = w.workload_name(o.pod(name=pod_name))
    assert len(name) <= 253
    assert DNS1123_SUBDOMAIN.match(name), name


# --- building -------------------------------------------------------------------------


def test_v1beta2_workload_shape():
    pod = o.pod(c.ROLE_WORKER, priority="ray-worker")
    wl = w.build_workload(pod, w.Priority("ray-worker", 100), w.V1BETA2)
    assert wl["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert wl["kind"] == "Workload"
    meta = wl["metadata"]
    assert meta["namespace"] == "team-a"
    assert meta["name"] == w.workload_name(pod)
    assert meta["ownerReferences"] == [{
        "apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
        "uid": pod["metadata"]["uid"], "controller": False, "blockOwnerDeletion": True,
    }]
    assert meta["labels"] == {
        c.CLUSTER_LABEL: "raycluster-gpu",
        c.GROUP_LABEL: "gpu-group",
        c.NODE_TYPE_LABEL: "worker",
        c.POD_UID_LABEL: pod["metadata"]["uid"],
        c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE,
    }
    # Kueue's own job-uid label would make Kueue finish it as an orphan.
    assert "kueue.x-k8s.io/job-uid" not in meta["labels"]
    spec = wl["spec"]
    assert spec["queueName"] == "team-a"
    assert spec["priorityClassRef"] == {"group": "kueue.x-k8s.io",
                                        "kind": "WorkloadPriorityClass", "name": "ray-worker"}
    assert spec["priority"] == 100
    assert "priorityClassName" not in spec
    (pod_set,) = spec["podSets"]
    assert pod_set["name"] == "main"
    assert pod_set["count"] == 1
    assert set(pod_set["template"]) == {"spec"}


def test_v1beta1_workload_uses_class_name_and_source():
    pod = o.pod(c.ROLE_HEAD)
    wl = w.build_workload(pod, w.Priority("ray-head", 1000), w.V1BETA1)
    assert wl["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    spec = wl["spec"]
    assert spec["priorityClassName"] == "ray-head"
    assert spec["priorityClassSource"] == "kueue.x-k8s.io/workloadpriorityclass"
    assert spec["priority"] == 1000
    assert "priorityClassRef" not in spec


def test_without_priority_neither_reference_nor_value_is_set():
    wl = w.build_workload(o.pod(), None, w.V1BETA2)
    assert "priorityClassRef" not in wl["spec"]
    assert "priority" not in wl["spec"]


def test_unknown_version_is_refused():
    with pytest.raises(ValueError):
        w.build_workload(o.pod(), None, "v1alpha1")


def test_template_is_the_pod_spec_without_our_gate():
    pod = o.pod()
    pod["spec"]["schedulingGates"].insert(0, {"name": "example.com/other"})
    template = w.pod_set_template(pod)["spec"]
    assert template["schedulingGates"] == [{"name": "example.com/other"}]
    assert template["containers"] == pod["spec"]["containers"]
    assert template["initContainers"] == pod["spec"]["initContainers"]
    assert template["tolerations"] == pod["spec"]["tolerations"]
    # the pod itself is untouched
    assert {"name": c.GATE} in pod["spec"]["schedulingGates"]


def test_template_drops_empty_gates_node_name_and_reserved_pods_resource():
    pod = o.pod()
    pod["spec"]["nodeName"] = "n1"
    pod["spec"]["containers"][0]["resources"]["requests"]["pods"] = "1"
    pod["spec"]["resources"] = {"limits": {"pods": "1", "cpu": "1"}}
    template = w.pod_set_template(pod)["spec"]
    assert "schedulingGates" not in template
    assert "nodeName" not in template
    assert "pods" not in template["containers"][0]["resources"]["requests"]
    assert template["resources"] == {"limits": {"cpu": "1"}}


def test_managed_fields_of_the_pod_do_not_leak_into_the_workload():
    pod = o.pod()
    assert pod["metadata"]["managedFields"]
    wl = w.build_workload(pod, None)
    assert "managedFields" not in wl["metadata"]
    assert "metadata" not in wl["spec"]["podSets"][0]["template"]


# --- reading --------------------------------------------------------------------------


@pytest.mark.parametrize("version", [w.V1BETA2, w.V1BETA1])
def test_state_readers(version):
    pod = o.pod()
    pending = o.workload(pod, "pending", version=version)
    reserved = o.workload(pod, "reserved", version=version)
    admitted = o.workload(pod, "admitted", version=version)
    evicted = o.workload(pod, "evicted", version=version)
    finished = o.workload(pod, "finished", version=version)
    assert not w.is_admitted(pending) and not w.is_quota_reserved(pending)
    assert w.is_quota_reserved(reserved) and not w.is_admitted(reserved)
    assert w.is_admitted(admitted) and not w.is_evicted(admitted)
    assert w.is_evicted(evicted)
    assert w.is_finished(finished) and not w.is_finished(admitted)
    assert w.priority_class_name(admitted) == "ray-worker"
    assert w.priority_value(admitted) == 100
    assert w.queue_name(admitted) == "team-a"
    assert adm.cluster_queue(admitted) == o.CQ
    assert adm.cluster_queue(pending) is None


def test_assigned_flavors_are_distinct():
    pod = o.pod()
    wl = o.workload(pod, "admitted")
    wl["status"]["admission"]["podSetAssignments"][0]["flavors"]["nvidia.com/gpu"] = "gpu-b"
    assert adm.assigned_flavors(wl) == ["gpu-a100", "gpu-b"]
    assert adm.assigned_flavors(o.workload(pod, "pending")) == []


def test_owner_and_pod_uid():
    pod = o.pod()
    wl = o.workload(pod)
    assert w.owner_pod(wl) == (pod["metadata"]["name"], pod["metadata"]["uid"])
    assert w.pod_uid_of(wl) == pod["metadata"]["uid"]
    wl["metadata"]["ownerReferences"] = []
    assert w.owner_pod(wl) is None
    assert w.pod_uid_of(wl) == pod["metadata"]["uid"]  # from our label


def test_ours_versus_kueues():
    pod = o.pod()
    assert w.is_ours(o.workload(pod))
    assert not w.is_ours(o.workload(pod, ours=False))


def test_pods_ready_reader():
    pod = o.pod()
    assert w.pods_ready(o.workload(pod, "admitted")) is None
    assert w.pods_ready(o.workload(pod, "admitted", pods_ready="True")) is True
    assert w.pods_ready(o.workload(pod, "admitted", pods_ready="False")) is False


def test_admission_check_updates_for_main():
    pod = o.pod()
    wl = o.workload(pod, "admitted")
    wl["status"]["admissionChecks"] = [{
        "name": "prov", "state": "Ready", "message": "", "lastTransitionTime": o.T1,
        "podSetUpdates": [{"name": "main", "nodeSelector": {"zone": "a"}},
                          {"name": "other", "nodeSelector": {"zone": "b"}}],
    }]
    assert adm.admission_check_updates(wl) == [{"name": "main", "nodeSelector": {"zone": "a"}}]


# --- status apply -----------------------------------------------------------------------


def test_status_body_carries_only_our_conditions():
    pod = o.pod()
    wl = o.workload(pod, "admitted")
    body = ws.status_apply_body(wl, [ws.ConditionUpdate(w.FINISHED, True, "PodDeleted", "gone")],
                               "2026-12-02T10:00:00Z")
    assert body["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert body["kind"] == "Workload"
    assert body["metadata"] == {"name": wl["metadata"]["name"], "namespace": "team-a"}
    assert set(body) == {"apiVersion", "kind", "metadata", "status"}
    assert body["status"] == {"conditions": [{
        "type": "Finished", "status": "True", "reason": "PodDeleted", "message": "gone",
        "lastTransitionTime": "2026-12-02T10:00:00Z", "observedGeneration": 1}]}


def test_status_body_keeps_our_other_condition_so_apply_does_not_drop_it():
    pod = o.pod()
    wl = o.workload(pod, "admitted", pods_ready="True")
    body = ws.status_apply_body(wl, [ws.ConditionUpdate(w.FINISHED, True, "Succeeded", "done")],
                               "2026-12-02T10:00:00Z")
    types = [x["type"] for x in body["status"]["conditions"]]
    assert types == ["PodsReady", "Finished"]
    assert body["status"]["conditions"][0] == w.condition(wl, w.PODS_READY)


def test_transition_time_moves_only_when_status_flips():
    pod = o.pod()
    wl = o.workload(pod, "admitted", pods_ready="True")
    same = ws.status_apply_body(
        wl, [ws.ConditionUpdate(w.PODS_READY, True, "Recovered", "x")], "2026-12-02T10:00:00Z")
    assert same["status"]["conditions"][0]["lastTransitionTime"] == o.T1
    flipped = ws.status_apply_body(
        wl, [ws.ConditionUpdate(w.PODS_READY, False, "WaitForRecovery", "x")],
        "2026-12-02T10:00:00Z")
    assert flipped["status"]["conditions"][0]["lastTransitionTime"] == "2026-12-02T10:00:00Z"


def test_long_messages_are_truncated():
    wl = o.workload(o.pod(), "admitted")
    body = ws.status_apply_body(wl, [ws.ConditionUpdate(w.FINISHED, True, "Failed", "x" * 5000)],
                               "2026-12-02T10:00:00Z")
    assert len(body["status"]["conditions"][0]["message"]) == 1024


def test_a_workload_made_with_a_controller_reference_still_belongs_to_its_pod():
    """Workloads an earlier raykueue made (controller: true) are read like today's."""
    pod = o.pod(c.ROLE_WORKER, priority="ray-worker")
    wl = w.build_workload(pod, w.Priority("ray-worker", 100), w.V1BETA2)
    assert w.owner_pod(wl) == (pod["metadata"]["name"], pod["metadata"]["uid"])
    wl["metadata"]["ownerReferences"][0]["controller"] = True
    assert w.owner_pod(wl) == (pod["metadata"]["name"], pod["metadata"]["uid"])
    assert wm.mismatch(wl, pod) is None
