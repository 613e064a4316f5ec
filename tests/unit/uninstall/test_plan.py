"""raykueue/uninstall/plan.py: what the uninstall decides from a snapshot (the e2e tier acts on it)."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from raykueue.core import contract as c
from raykueue.core import rayobjects
from raykueue.uninstall import patches as up
from raykueue.uninstall import plan as p
from raykueue.uninstall import render as ur
from raykueue.uninstall import world as uw
from testkit.unit.uninstall_plan import NS, apply_all, cluster_spec, obj


def pod(name: str, cluster: dict[str, Any] | None, *, gated: bool = False, ours: bool = True
        ) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-pod-{name}",
                            "labels": {c.NODE_TYPE_LABEL: "worker"}}
    if ours:
        meta["labels"][c.MANAGED_BY_LABEL] = c.MANAGED_BY_VALUE
    if cluster is not None:
        meta["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "controller": True,
                                    "name": cluster["metadata"]["name"], "uid": cluster["metadata"]["uid"]}]
    return {"metadata": meta, "spec": {"schedulingGates": [{"name": c.GATE}] if gated else []}}


def local_queue(name: str, ns: str = NS) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns}}


def units(plan: p.Plan) -> dict[str, p.Unit]:
    return {str(u.ref): u for u in plan.units}


def test_an_opted_in_raycluster_is_suspended_then_handed_back_to_its_queue() -> None:
    rc = obj("RayCluster", "rc")
    world = uw.World(rayclusters=[rc], pods=[pod("w1", rc), pod("w2", rc, gated=True)],
                    local_queues=[local_queue("q")])
    (unit,) = p.make_plan(world, handback=True).units
    assert (unit.ref.kind, unit.pods, unit.gated, unit.needs_suspend) == ("RayCluster", 2, 1, True)
    assert unit.handback == p.Handback("q", f"its annotation {c.QUEUE_ANNOTATION}")
    assert p.make_plan(world, handback=False).units[0].handback is None


def test_objects_that_never_opted_in_or_are_kueues_are_left_alone() -> None:
    theirs = obj("RayCluster", "theirs", opted_in=False)
    kueues = obj("RayCluster", "kueues")
    kueues["metadata"]["labels"][c.QUEUE_LABEL] = "q"
    plan = p.make_plan(uw.World(rayclusters=[theirs, kueues], pods=[pod("t", theirs, ours=False)]),
                       handback=True)
    assert plan.units == () and [str(r) for r in plan.kueues] == [f"RayCluster {NS}/kueues"]


def test_a_rayjobs_cluster_is_handled_through_its_rayjob() -> None:
    job = obj("RayJob", "job")
    rc = obj("RayCluster", "job-x", owner=("RayJob", "job", job["metadata"]["uid"]))
    plan = p.make_plan(uw.World(rayclusters=[rc], rayjobs=[job], pods=[pod("h", rc)],
                               local_queues=[local_queue("q")]), handback=True)
    (unit,) = plan.units
    assert (unit.ref.kind, unit.ref.name, unit.pods, unit.blocker) == ("RayJob", "job", 1, None)
    assert any("from the beginning" in note for note in unit.handback.notes)  # type: ignore[union-attr]


def test_what_kuberay_cannot_suspend_in_place_blocks() -> None:
    svc = obj("RayService", "svc")
    keeps = obj("RayJob", "keeps")
    keeps["spec"]["shutdownAfterJobFinishes"] = False
    plan = p.make_plan(uw.World(rayjobs=[keeps], rayservices=[svc]), handback=False)
    found = {str(u.ref): u.blocker for u in plan.blockers}
    assert found == {f"RayService {NS}/svc": p.RAYSERVICE_BLOCKER,
                     f"RayJob {NS}/keeps": p.RAYJOB_KEEPS_CLUSTER_BLOCKER}
    text = "\n".join(ur.render(plan, act=True))
    assert "blocked: nothing is changed" in text and p.RAYSERVICE_BLOCKER in text


def test_a_finished_rayjobs_kept_cluster_is_suspended_alone_and_not_handed_back() -> None:
    job = obj("RayJob", "done")
    job["spec"]["shutdownAfterJobFinishes"] = False
    job["status"] = {"jobDeploymentStatus": "Complete"}
    rc = obj("RayCluster", "done-x", owner=("RayJob", "done", job["metadata"]["uid"]))
    plan = p.make_plan(uw.World(rayclusters=[rc], rayjobs=[job], pods=[pod("h", rc)],
                               local_queues=[local_queue("q")]), handback=True)
    (unit,) = plan.units
    assert (str(unit.ref), unit.blocker, unit.handback) == (f"RayCluster {NS}/done-x", None, None)
    assert "finished" in unit.handback_refusal


def test_a_pod_no_ray_object_owns_is_deleted() -> None:
    plan = p.make_plan(uw.World(pods=[pod("bare", None, gated=True), pod("other", None, ours=False)]),
                       handback=False)
    assert [r.name for r in plan.bare_pods] == ["bare"] and plan.units == ()


def test_a_pod_opted_in_only_through_its_template_makes_its_cluster_a_unit() -> None:
    rc = obj("RayCluster", "rc", opted_in=False,
             cluster=cluster_spec(template_annotations={c.STANDALONE_ANNOTATION: "true"}))
    assert [u.ref.name for u in p.make_plan(uw.World(rayclusters=[rc]), handback=False).units] == ["rc"]


@pytest.mark.parametrize(("annotation", "templates", "queues", "want", "why"), [
    ("q", None, ["q"], "q", "its annotation"),
    (None, {c.QUEUE_ANNOTATION: "t"}, ["t"], "t", "pod templates"),
    (None, None, ["default"], "default", "LocalQueue default"),
    (None, None, [], None, "no queue"),
])
def test_the_queue_a_handed_back_object_goes_to(annotation: str | None, templates: dict[str, str] | None,
                                                queues: list[str], want: str | None, why: str) -> None:
    rc = obj("RayCluster", "rc", queue=annotation, cluster=cluster_spec(template_annotations=templates))
    (unit,) = p.make_plan(uw.World(rayclusters=[rc], local_queues=[local_queue(q) for q in queues]),
                          handback=True).units
    if want is None:
        assert unit.handback is None and why in unit.handback_refusal
    else:
        assert unit.handback is not None and unit.handback.queue == want and why in unit.handback.source


def test_a_queue_that_does_not_exist_is_said() -> None:
    (unit,) = p.make_plan(uw.World(rayclusters=[obj("RayCluster", "rc", queue="gone")]), handback=True).units
    assert unit.handback is not None and "does not exist" in unit.handback.notes[0]


def test_templates_naming_different_queues_are_not_guessed() -> None:
    rc = obj("RayCluster", "rc", queue=None)
    rc["spec"]["headGroupSpec"]["template"]["metadata"]["annotations"] = {c.QUEUE_ANNOTATION: "a"}
    rc["spec"]["workerGroupSpecs"][0]["template"]["metadata"]["annotations"] = {c.QUEUE_ANNOTATION: "b"}
    (unit,) = p.make_plan(uw.World(rayclusters=[rc]), handback=True).units
    assert unit.handback is None and "different queues (a, b)" in unit.handback_refusal


def test_a_users_suspend_is_kept_and_the_uninstalls_own_is_handed_back() -> None:
    users = obj("RayCluster", "users", suspend=True)
    ours = obj("RayCluster", "ours", suspend=True)
    ours["metadata"]["annotations"][c.SUSPENDED_BY_ANNOTATION] = c.SUSPENDED_BY_UNINSTALL
    found = units(p.make_plan(uw.World(rayclusters=[users, ours], local_queues=[local_queue("q")]),
                              handback=True))
    assert not found[f"RayCluster {NS}/users"].needs_suspend
    assert found[f"RayCluster {NS}/users"].handback is None
    assert "suspended before the uninstall" in found[f"RayCluster {NS}/users"].handback_refusal
    assert found[f"RayCluster {NS}/ours"].handback is not None


@pytest.mark.parametrize("kind", ["RayCluster", "RayJob"])
@pytest.mark.parametrize("annotated", [True, False])
def test_suspend_patch_marks_what_the_uninstall_suspended(kind: str, annotated: bool) -> None:
    body = obj(kind, "x")
    if not annotated:
        del body["metadata"]["annotations"]
    after = jsonpatch.apply_patch(body, up.suspend_patch(kind, body))
    assert after["spec"]["suspend"] is True
    assert after["metadata"]["annotations"][c.SUSPENDED_BY_ANNOTATION] == c.SUSPENDED_BY_UNINSTALL
    # Only this object: one made again under the same name is not touched.
    other = copy.deepcopy(body)
    other["metadata"]["uid"] = "another"
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(other, up.suspend_patch(kind, body))


def test_an_object_being_deleted_blocks_nothing_and_is_only_waited_for() -> None:
    svc = obj("RayService", "svc")
    svc["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    (unit,) = p.make_plan(uw.World(rayservices=[svc]), handback=True).units
    assert (unit.blocker, unit.deleting, unit.needs_suspend, unit.handback) == (None, True, False, None)


def raykueue_keys(meta: dict[str, Any]) -> list[str]:
    return [k for k in {**(meta.get("labels") or {}), **(meta.get("annotations") or {})}
            if k == c.STANDALONE_ANNOTATION or k.startswith("raykueue.io/")]


def test_handback_sets_the_queue_and_removes_every_mark_of_raykueue() -> None:
    rc = obj("RayCluster", "rc", suspend=True,
             cluster=cluster_spec(template_annotations={c.STANDALONE_ANNOTATION: "true",
                                                        c.QUEUE_ANNOTATION: "q"}))
    rc["metadata"]["annotations"][c.SUSPENDED_BY_ANNOTATION] = c.SUSPENDED_BY_UNINSTALL
    patches = up.handback_patches("RayCluster", rc, "q")
    assert len(patches) == 1 and patches[0][0] == {"op": "test", "path": "/metadata/uid",
                                                    "value": rc["metadata"]["uid"]}
    after = apply_all(copy.deepcopy(rc), patches)
    assert after["metadata"]["labels"] == {"team": "a", c.QUEUE_LABEL: "q"}
    assert raykueue_keys(after["metadata"]) == []
    for _, template in rayobjects.templates(after, "RayCluster"):
        assert raykueue_keys(template["metadata"]) == [] and template["metadata"]["labels"] == {"app": "x"}
        assert "schedulingGates" not in template["spec"]
    assert after["spec"]["suspend"] is True  # Kueue resumes it once admitted


def test_handback_of_an_autoscaled_cluster_makes_it_a_kueue_elastic_job_first() -> None:
    rc = obj("RayCluster", "rc", suspend=True, cluster=cluster_spec(autoscaling=True))
    rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["schedulingGates"] = [{"name": "other"}]
    first, second = up.handback_patches("RayCluster", rc, "q")
    # Alone: Kueue refuses the annotation in the update that brings the queue.
    assert [op["op"] for op in first] == ["test", "add"]
    assert not any(c.QUEUE_LABEL in op["path"] for op in first)
    after = apply_all(copy.deepcopy(rc), [first, second])
    assert after["metadata"]["annotations"] == {c.KUEUE_ELASTIC_JOB_ANNOTATION: "true"}
    head, worker = (t for _, t in rayobjects.templates(after, "RayCluster"))
    assert head["spec"]["schedulingGates"] == [{"name": c.KUEUE_ELASTIC_JOB_GATE}]
    assert worker["spec"]["schedulingGates"] == [{"name": "other"}, {"name": c.KUEUE_ELASTIC_JOB_GATE}]


def test_handback_of_an_autoscaled_rayjob_needs_no_template_gate() -> None:
    job = obj("RayJob", "job", suspend=True, cluster=cluster_spec(autoscaling=True))
    after = apply_all(copy.deepcopy(job), up.handback_patches("RayJob", job, "q"))
    assert after["metadata"]["annotations"][c.KUEUE_ELASTIC_JOB_ANNOTATION] == "true"
    assert all("schedulingGates" not in t["spec"] for _, t in rayobjects.templates(after, "RayJob"))


def test_handback_of_an_object_without_labels_adds_the_map() -> None:
    rc = obj("RayCluster", "rc")
    del rc["metadata"]["labels"]
    after = apply_all(copy.deepcopy(rc), up.handback_patches("RayCluster", rc, "q"))
    assert after["metadata"]["labels"] == {c.QUEUE_LABEL: "q"}


def test_raykueues_webhook_configurations_are_found_by_name_or_by_their_webhooks() -> None:
    assert uw.is_raykueue_webhook_config({"metadata": {"name": c.MUTATING_WEBHOOK_CONFIG}})
    assert uw.is_raykueue_webhook_config({"metadata": {"name": "renamed"},
                                         "webhooks": [{"name": "legacy-pods.raykueue.io"}]})
    assert not uw.is_raykueue_webhook_config({"metadata": {"name": "kueue-mutating-webhook-configuration"},
                                             "webhooks": [{"name": "mpod.kb.io"}]})


def test_the_dry_run_says_what_each_step_does() -> None:
    rc = obj("RayCluster", "rc")
    world = uw.World(rayclusters=[rc], pods=[pod("w", rc, gated=True)], workloads=[{}],
                    webhook_configs=[("mutatingwebhookconfigurations", {"metadata": {"name": "zz"}})])
    text = "\n".join(ur.render(p.make_plan(world, handback=False), act=False))
    assert "a dry run: nothing is changed; --yes acts on it" in text
    assert f"RayCluster {NS}/rc; 1 pods (1 gated)" in text
    assert "Delete raykueue's webhook configurations" in text and "zz" in text
    assert "Leave them suspended and opted in" in text and "--handback" in text
    empty = "\n".join(ur.render(p.make_plan(uw.World(), handback=False), act=True))
    assert "Nothing of raykueue is left" in empty


@pytest.mark.parametrize("argv", [["uninstall"], ["handback", "raycluster", "rc", "-n", NS, "--yes"]])
def test_the_commands_need_a_cluster_and_say_so(argv: list[str], tmp_path: Any,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from raykueue.app.cli import main

    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config either
    assert main([*argv, "--kubeconfig", str(tmp_path / "absent")]) == 1
    assert "no cluster reachable" in capsys.readouterr().err


def test_what_lives_in_a_terminating_namespace_is_left_to_the_namespace_controller() -> None:
    """Nothing new can start there; waiting for its pods could hang behind another's finalizer."""
    going, staying = "going", "staying"
    world = uw.World(
        rayclusters=[{"metadata": {"name": "rc", "namespace": ns}} for ns in (going, staying)],
        pods=[{"metadata": {"name": "rc-head", "namespace": ns}} for ns in (going, staying)],
        workloads=[{"metadata": {"name": "wl", "namespace": going}}])
    left = world.outside({going})
    assert [x["metadata"]["namespace"] for x in (*left.rayclusters, *left.pods)] == [staying, staying]
    assert left.workloads == ()
