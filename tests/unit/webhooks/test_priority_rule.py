"""Head priority only for a real head; the owner's priority-class label as Kueue reads it.

A head-only WorkloadPriorityClass (the head class by default) lets a pod preempt
other clusters' heads, and `ray.io/node-type: head` is a label anyone may write. So
only a pod a RayCluster controls (as KubeRay makes heads) gets one. A pod that names
one itself without being a real head is refused with what to change (as a worker
group's template is); one that would get it by default or from its owner gets the
worker class and a warning, since it asked for nothing.

Kueue reads a job's priority from the `kueue.x-k8s.io/priority-class` label of the
object it makes the Workload for (the top-level Ray object), and only the label.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from raykueue.core import contract as c
from raykueue.core.priority import PodPriority, Priority, PriorityPolicy, choose
from raykueue.core.refusal import Refusal
from raykueue.webhooks.admit import admit_create
from raykueue.webhooks.classify import PodContext
from raykueue.webhooks.review import parse
from testkit import reviews as rv

POLICY = PriorityPolicy()
HEAD, WORKER = c.DEFAULT_HEAD_PRIORITY_CLASS, c.DEFAULT_WORKER_PRIORITY_CLASS


def rule(own: str | None = None, owner: tuple[str, str] | None = None, role: str = c.ROLE_HEAD,
         real_head: bool = True, policy: PriorityPolicy = POLICY) -> Priority | Refusal:
    return choose(own, owner, role, real_head, policy, "ns/p")


# --- the pure rule ------------------------------------------------------------------


def test_a_real_head_gets_the_head_class_and_a_worker_the_worker_class() -> None:
    assert rule() == Priority(HEAD, "head default")
    assert rule(role=c.ROLE_WORKER, real_head=False) == Priority(WORKER, "worker default")


def test_a_head_without_a_raycluster_gets_the_worker_class_with_a_warning() -> None:
    got = rule(real_head=False)
    assert isinstance(got, Priority) and got.name == WORKER
    (warning,) = got.warnings
    assert HEAD in warning and "no RayCluster owns it" in warning


def test_a_head_without_a_raycluster_naming_a_head_only_class_is_refused() -> None:
    got = rule(own=HEAD, real_head=False)
    assert isinstance(got, Refusal)
    assert "no RayCluster owns it" in got.message and "remove the label" in got.message
    strict = PriorityPolicy(head_only_priority_classes=frozenset({"gold"}))
    assert isinstance(rule(own="gold", real_head=False, policy=strict), Refusal)
    # A class that is not head-only is anyone's to name.
    assert rule(own="batch", real_head=False) == Priority("batch", "pod label")


def test_the_owners_label_is_honoured_for_head_and_workers() -> None:
    owner = ("team-high", "RayCluster ns/rc label")
    assert rule(owner=owner) == Priority("team-high", "RayCluster ns/rc label")
    assert rule(owner=owner, role=c.ROLE_WORKER, real_head=False) == Priority(
        "team-high", "RayCluster ns/rc label")


def test_the_pods_own_label_wins_over_the_owners() -> None:
    assert rule(own="mine", owner=("theirs", "RayCluster ns/rc label")) == Priority("mine", "pod label")


def test_a_head_only_class_on_the_owner_reaches_the_head_only() -> None:
    owner = (HEAD, "RayCluster ns/rc label")
    assert rule(owner=owner) == Priority(HEAD, "RayCluster ns/rc label")
    worker = rule(owner=owner, role=c.ROLE_WORKER, real_head=False)
    # Not refused: the label is on the cluster (a platform policy may set it), not the pod.
    assert isinstance(worker, Priority) and worker.name == WORKER and worker.warnings
    assert "RayCluster ns/rc label" in worker.warnings[0]


def test_a_worker_naming_a_head_only_class_is_still_refused() -> None:
    got = rule(own=HEAD, role=c.ROLE_WORKER, real_head=False)
    assert isinstance(got, Refusal) and "only Ray heads may use" in got.message


def test_an_invalid_class_from_the_owner_is_refused_with_where_it_came_from() -> None:
    got = rule(owner=("Not_Valid", "RayJob ns/job label"))
    assert isinstance(got, Refusal) and "RayJob ns/job label" in got.message


# --- through the pod webhook ---------------------------------------------------------


def opted_in(review: dict[str, Any]) -> dict[str, Any]:
    return rv.set_label(rv.set_label(review, c.OPTED_IN_LABEL, c.OPTED_IN_VALUE), c.QUEUE_LABEL, "team-a")


def bare_head(**labels: str) -> dict[str, Any]:
    review = rv.set_annotation(rv.set_label(rv.head_review(), c.QUEUE_LABEL, "team-a"),
                               c.STANDALONE_ANNOTATION, "true")
    rv.pod_of(review)["metadata"].pop("ownerReferences", None)
    for key, value in labels.items():
        review = rv.set_label(review, key, value)
    return review


def owner(kind: str, name: str, label: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "team-a",
                            "annotations": {c.STANDALONE_ANNOTATION: "true"}}
    if label is not None:
        meta["labels"] = {c.PRIORITY_CLASS_LABEL: label}
    return {"kind": kind, "metadata": meta}


def run(review: dict[str, Any], ctx: PodContext | None = None, policy: PriorityPolicy = POLICY):
    return admit_create(parse(orjson.dumps(review)), ctx or PodContext(), policy)


def test_a_bare_pod_calling_itself_a_head_is_gated_with_the_worker_class_and_told_why() -> None:
    outcome = run(bare_head())
    assert outcome.decision == "gated" and outcome.priority == WORKER
    assert any("no RayCluster owns it" in w for w in outcome.verdict.warnings)
    # Nor the head's PriorityClass for the scheduler.
    policy = PriorityPolicy(pod_priority=PodPriority("ray-head-pc", "ray-worker-pc"))
    ctx = PodContext(priority_values={"ray-head-pc": 100000, "ray-worker-pc": 100})
    patch = orjson.dumps(run(bare_head(), ctx, policy).verdict.patch).decode()
    assert "ray-worker-pc" in patch and "ray-head-pc" not in patch


def test_a_bare_pod_naming_the_head_class_is_refused() -> None:
    outcome = run(bare_head(**{c.PRIORITY_CLASS_LABEL: HEAD}))
    assert outcome.decision == "denied" and "no RayCluster owns it" in outcome.verdict.message


def test_a_kuberay_head_keeps_the_head_class() -> None:
    outcome = run(opted_in(rv.head_review()), PodContext(owners=(owner("RayCluster", "rc", None),)))
    assert outcome.decision == "gated" and outcome.priority == HEAD and not outcome.verdict.warnings


@pytest.mark.parametrize("job_label", [None, "team-high"])
def test_the_top_level_owners_label_decides_as_kueue_reads_it(job_label: str | None) -> None:
    """KubeRay's RayCluster for a RayJob: Kueue would read the RayJob's label."""
    owners = (owner("RayCluster", "rc", "cluster-class"), owner("RayJob", "job", job_label))
    outcome = run(opted_in(rv.worker_review()), PodContext(owners=owners))
    assert outcome.priority == (job_label or "cluster-class")


def test_kueues_defaulted_class_on_the_owner_is_not_a_choice() -> None:
    owners = (owner("RayCluster", "rc", c.KUEUE_DEFAULT_PRIORITY_CLASS),)
    outcome = run(opted_in(rv.head_review()), PodContext(owners=owners))
    assert outcome.priority == HEAD


def test_a_head_controlled_by_a_rayjob_is_not_a_real_head() -> None:
    review = opted_in(rv.head_review())
    for ref in rv.pod_of(review)["metadata"]["ownerReferences"]:
        ref["kind"] = "RayJob"
    outcome = run(review, PodContext(owners=(owner("RayJob", "rc", None),)))
    assert outcome.priority == WORKER and outcome.verdict.warnings
