"""The hand-over to Kueue: an opted-in RayCluster Kueue suspends where it manages unqueued jobs.

Kueue's job reconciler (v0.19.2 jobframework/reconciler.go `ReconcileGenericJob`)
takes a Ray object without a queue label only with manageJobsWithoutQueueName and
its managedJobsNamespaceSelector matching the namespace; finding no Workload for a
running object it suspends it (`ensureOneWorkload`, "No matching Workload"), then
makes one Workload for it. The first stage sees that suspend and hands the cluster
over; every later stage leaves it Kueue's.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from raykueue.controller.handover import HandOverEvents, handover_message
from raykueue.core import contract as c
from raykueue.kube.cache import ADDED, DELETED, MODIFIED
from raykueue.webhooks.rayobjects import Stage
from raykueue.webhooks.rayrules import NamespaceFacts
from testkit.unit.webhooks_rayobjects import (
    DEFAULT_QUEUE,
    OPTED_IN,
    create,
    outcome,
    ray_object,
    refusal,
    stamps,
    through,
)

MANAGED = NamespaceFacts(kueue_manages_unqueued=True, namespace="team-a")
MANAGED_WITH_DEFAULT = NamespaceFacts(kueue_manages_unqueued=True, default_queue_exists=True,
                                      namespace="team-a")
UNKNOWN = NamespaceFacts(kueue_manages_unqueued=None, namespace="team-a")


def running(kind: str = "RayCluster", queue: str | None = "team-a") -> dict[str, Any]:
    """An opted-in object as the API server stores it after raykueue's stages."""
    labels = {c.QUEUE_LABEL: queue} if queue else None
    return create(ray_object(kind, annotations=OPTED_IN, labels=labels), default_queue_exists=False)


def suspended(obj: dict[str, Any]) -> dict[str, Any]:
    """What Kueue's stopJob sends: the same object with suspend set."""
    new = copy.deepcopy(obj)
    node = new["spec"] if new["kind"] != "RayService" else new["spec"]["rayClusterConfig"]
    node["suspend"] = True
    return new


def kueue_suspends(old: dict[str, Any], facts: NamespaceFacts = MANAGED) -> dict[str, Any]:
    """FIRST then LAST on Kueue's suspend, as the API server runs them."""
    first = through(suspended(old), Stage.FIRST, "UPDATE", old, facts=facts)
    return through(first, Stage.LAST, "UPDATE", old, facts=facts)


def test_kueues_suspend_hands_the_cluster_over() -> None:
    old = running()
    assert stamps(old) == ["true", "true", "true"]
    new = kueue_suspends(old)
    assert new["spec"]["suspend"] is True  # Kueue's suspend stays: the cluster is Kueue's
    assert stamps(new) == [None, None, None]  # no pod is sent to raykueue or refused by its policy
    assert new["metadata"]["labels"][c.QUEUE_LABEL] == "team-a"  # LAST keeps Kueue's label
    assert c.QUEUE_ANNOTATION not in new["metadata"]["annotations"]
    assert "manageJobsWithoutQueueName" in new["metadata"]["annotations"][c.HANDED_TO_KUEUE_ANNOTATION]
    # The opt-in stays: it is the user's manifest; the Event tells them what to change.
    assert new["metadata"]["annotations"][c.STANDALONE_ANNOTATION] == "true"


def test_a_queue_from_the_namespace_default_becomes_kueues_label() -> None:
    old = create(ray_object("RayCluster", annotations=OPTED_IN), default_queue_exists=True)
    assert c.QUEUE_ANNOTATION not in old["metadata"]["annotations"]
    new = kueue_suspends(old, MANAGED_WITH_DEFAULT)
    assert new["metadata"]["labels"][c.QUEUE_LABEL] == c.DEFAULT_LOCAL_QUEUE


def test_without_any_queue_it_is_handed_over_unlabelled_and_the_event_says_so() -> None:
    old = create(ray_object("RayCluster", annotations=OPTED_IN), default_queue_exists=False)
    new = kueue_suspends(old)
    assert c.QUEUE_LABEL not in (new["metadata"].get("labels") or {})
    assert f"set the label {c.QUEUE_LABEL}" in (handover_message(new) or "")


def test_a_suspend_where_kueue_does_not_manage_unqueued_jobs_is_the_users() -> None:
    old = running()
    new = through(suspended(old), Stage.FIRST, "UPDATE", old, facts=NamespaceFacts(namespace="team-a"))
    assert stamps(new) == ["true", "true", "true"]
    assert c.HANDED_TO_KUEUE_ANNOTATION not in new["metadata"]["annotations"]


def test_a_suspend_before_the_namespace_is_known_is_retried() -> None:
    old = running()
    message = refusal(suspended(old), "UPDATE", old, facts=UNKNOWN)
    assert "retry" in message and "team-a" in message


def test_an_update_that_does_not_suspend_changes_nothing_of_the_regime() -> None:
    """Until Kueue suspends it, the cluster is raykueue's: an ordinary update keeps it so."""
    old = running()
    touched = copy.deepcopy(old)
    touched["metadata"]["annotations"]["note"] = "x"
    new = through(touched, Stage.FIRST, "UPDATE", old, facts=MANAGED)
    assert stamps(new) == ["true", "true", "true"]
    assert c.HANDED_TO_KUEUE_ANNOTATION not in new["metadata"]["annotations"]


def test_after_the_hand_over_every_update_leaves_it_kueues() -> None:
    handed = kueue_suspends(running())
    resumed = copy.deepcopy(handed)
    resumed["spec"]["suspend"] = False  # Kueue's startJob once its Workload is admitted
    after = through(through(resumed, Stage.FIRST, "UPDATE", handed, facts=MANAGED),
                    Stage.LAST, "UPDATE", handed, facts=MANAGED)
    assert after["spec"]["suspend"] is False
    assert stamps(after) == [None, None, None]
    assert after["metadata"]["labels"][c.QUEUE_LABEL] == "team-a"
    # A re-apply of the user's manifest with its template stamps gone stays unstamped,
    # and the opt-in may now be removed while it runs: the regime changed already.
    unopted = copy.deepcopy(after)
    del unopted["metadata"]["annotations"][c.STANDALONE_ANNOTATION]
    assert outcome(unopted, Stage.FIRST, "UPDATE", after, facts=MANAGED).verdict.allowed


def test_a_raycluster_made_from_a_handed_over_rayjob_is_kueues_from_its_creation() -> None:
    """KubeRay copies a RayJob's annotations and labels onto the RayCluster it makes."""
    job = kueue_suspends(running("RayJob"))
    assert job["metadata"]["labels"][c.QUEUE_LABEL] == "team-a"
    made = ray_object("RayCluster", annotations=job["metadata"]["annotations"],
                      labels=job["metadata"]["labels"])
    answer = outcome(made, Stage.FIRST, facts=MANAGED)  # not refused as a new opt-in there
    assert answer.verdict.allowed
    stored = jsonpatch.apply_patch(made, answer.verdict.patch or [])
    stored = through(stored, Stage.LAST, facts=MANAGED)
    assert stamps(stored) == [None, None, None]
    assert stored["metadata"]["labels"][c.QUEUE_LABEL] == "team-a"


def test_the_plain_create_rule_still_refuses_a_new_opt_in_there() -> None:
    assert "manageJobsWithoutQueueName" in refusal(ray_object("RayCluster", annotations=OPTED_IN),
                                                   facts=MANAGED)


def test_default_queue_facts_do_not_hand_over_without_kueue_managing() -> None:
    old = running()
    new = through(suspended(old), Stage.FIRST, "UPDATE", old, facts=DEFAULT_QUEUE)
    assert c.HANDED_TO_KUEUE_ANNOTATION not in new["metadata"]["annotations"]


# --- the Event ---------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.recorded: list[tuple[dict[str, Any], str, str, str]] = []

    def record(self, obj, type, reason, message, action=None) -> None:
        self.recorded.append((obj, type, reason, message))


def cached(obj: dict[str, Any], uid: str = "u1", kind: str = "RayCluster") -> dict[str, Any]:
    """As the owner caches keep it (webhooks/reads.py keep_metadata): kind and metadata."""
    meta = {**obj["metadata"], "uid": uid}
    return {"kind": kind, "metadata": meta}


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    # The handler writes off the watch thread; run that thread's target inline here.
    class Inline:
        def __init__(self, target, name, daemon, args, kwargs) -> None:
            self.run = lambda: target(*args, **kwargs)

        def start(self) -> None:
            self.run()

    monkeypatch.setattr("raykueue.controller.handover.threading.Thread", Inline)
    return Recorder()


def test_one_event_when_the_leader_sees_a_cluster_handed_over(recorder: Recorder) -> None:
    before, after = running(), kueue_suspends(running())
    events = HandOverEvents(recorder, lambda: True)  # type: ignore[arg-type]
    events(ADDED, cached(before))
    events(MODIFIED, cached(after))
    events(MODIFIED, cached(after))  # KubeRay's status updates after it: no second Event
    ((obj, type_, reason, message),) = recorder.recorded
    assert (obj["apiVersion"], obj["kind"], obj["metadata"]["uid"]) == ("ray.io/v1", "RayCluster", "u1")
    assert (type_, reason) == ("Warning", c.HANDED_TO_KUEUE_REASON)
    assert "raykueue deleted no pod" in message and "managedJobsNamespaceSelector" in message
    assert f"{c.QUEUE_LABEL}=team-a" in message and c.STANDALONE_ANNOTATION in message


def test_no_event_for_one_handed_over_before_it_was_watched_or_seen_by_a_follower(recorder: Recorder) -> None:
    handed = kueue_suspends(running())
    events = HandOverEvents(recorder, lambda: True)  # type: ignore[arg-type]
    events.prime([cached(handed)])  # a restart: listed handed over already
    events(MODIFIED, cached(handed))
    follower = HandOverEvents(recorder, lambda: False)  # type: ignore[arg-type]
    follower(ADDED, cached(running(), "u2"))
    follower(MODIFIED, cached(handed, "u2"))
    events(DELETED, cached(handed))
    assert recorder.recorded == []


# --- a RayJob and a RayService: Kueue suspends them, not their RayCluster ---------------


@pytest.mark.parametrize("kind", ["RayJob", "RayService"])
def test_kueues_suspend_of_a_rayjob_or_rayservice_hands_it_over(kind: str) -> None:
    """Kueue v0.19.2 suspends a RayJob's `spec.suspend` and a RayService's
    `spec.rayClusterConfig.suspend` (rayservice_controller.go `Suspend`)."""
    new = kueue_suspends(running(kind))
    assert new["metadata"]["labels"][c.QUEUE_LABEL] == "team-a"
    assert c.QUEUE_ANNOTATION not in new["metadata"]["annotations"]
    assert kind in new["metadata"]["annotations"][c.HANDED_TO_KUEUE_ANNOTATION]
    node = new["spec"] if kind == "RayJob" else new["spec"]["rayClusterConfig"]
    assert node["suspend"] is True  # the last stage keeps Kueue's suspend
    assert stamps(new) == [None, None, None]


@pytest.mark.parametrize("path", ["manifests/webhooks.yaml", "charts/raykueue/templates/webhooks.yaml"])
def test_the_rayjob_and_rayservice_entries_are_called_on_a_suspend(path: str) -> None:
    """The hand-over happens only if the API server sends the suspend to raykueue:
    the first-stage entry's scope names each kind's suspend field (the submissionMode
    condition of the RayJob entry stays). tests/e2e/test_handover_rayjob.py shows the
    RayJob's on the real API server."""
    text = (Path(__file__).parents[3] / path).read_text()
    entries = {m.group(1): m.group(2) for m in re.finditer(
        r"- name: (first-ray\w+)\.raykueue\.io\n(.*?)(?=\n  - name: |\n---)", text, re.S)}
    suspend = {"first-rayclusters": "object.spec.?suspend.orValue(false) &&",
               "first-rayjobs": "object.spec.?suspend.orValue(false) &&",
               "first-rayservices": "object.spec.?rayClusterConfig.?suspend.orValue(false) &&"}
    assert set(entries) == set(suspend)
    for name, needle in suspend.items():
        assert needle in entries[name], name
    assert "object.spec.?submissionMode" in entries["first-rayjobs"]


def test_the_event_goes_on_the_rayjob_and_not_on_the_cluster_made_from_it(recorder: Recorder) -> None:
    before, after = running("RayJob"), kueue_suspends(running("RayJob"))
    jobs = HandOverEvents(recorder, lambda: True)  # type: ignore[arg-type]
    jobs(ADDED, cached(before, kind="RayJob"))
    jobs(MODIFIED, cached(after, kind="RayJob"))
    # KubeRay's new RayCluster carries the RayJob's annotations, the mark included,
    # from its creation: the RayCluster handler never saw it unmarked.
    clusters = HandOverEvents(recorder, lambda: True)  # type: ignore[arg-type]
    made = cached(after, "u2")
    clusters(ADDED, made)
    clusters(MODIFIED, made)
    ((obj, _, reason, message),) = recorder.recorded
    assert (obj["kind"], obj["metadata"]["uid"], reason) == ("RayJob", "u1", c.HANDED_TO_KUEUE_REASON)
    assert message.startswith("Kueue took RayJob rc (") and "recreate the RayJob" in message
