"""The one rule for removing a pod (issue 28), as `removal.confirm` and `decide` apply it.

`confirm` is given what the handler reads live; every case below is one that used to
delete (or would, by the rule) and must now hold only on that evidence.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from raykueue.controller import actions as a
from raykueue.controller import decide as d
from raykueue.controller import removal
from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.core.clock import timestamp
from testkit import controller_objects as o
from testkit.unit.controller_decide import ctx

GRACE = 120.0
SINCE = timestamp(o.T1)  # the pending Workload's last admission change
assert SINCE is not None
LATE = SINCE + GRACE + 1
EARLY = SINCE + GRACE - 30


def raycluster(pod: dict[str, Any], opted_in: str | None = "true", deleting: bool = False
               ) -> dict[str, Any]:
    ref = pod["metadata"]["ownerReferences"][0]
    meta: dict[str, Any] = {"name": ref["name"], "uid": ref["uid"], "namespace": "team-a"}
    if opted_in is not None:
        meta["annotations"] = {c.STANDALONE_ANNOTATION: opted_in}
    if deleting:
        meta["deletionTimestamp"] = o.T2
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta}


def running(role: str = c.ROLE_WORKER, **kw: Any) -> dict[str, Any]:
    return o.pod(role, gated=False, phase="Running", ready=True, **kw)


def confirm(pod: dict[str, Any] | None, own: dict[str, Any] | None, *, uid: str | None = None,
            evidence: dict[str, Any] | None = None, rc: dict[str, Any] | None = None,
            peers: list[tuple[dict[str, Any], dict[str, Any] | None]] | None = None,
            now: float = LATE) -> removal.Justification:
    expected = uid or (pod["metadata"]["uid"] if pod is not None else "gone")
    return removal.confirm(expected, pod, own, evidence, rc, peers or [], now, GRACE)


# --- cause (a): Kueue evicted the pod's own Workload ----------------------------------------


def test_kueues_eviction_of_the_pods_own_workload_is_proof():
    pod = running()
    verdict = confirm(pod, o.workload(pod, "evicted"))
    assert verdict.justified and verdict.cause == removal.KUEUE_EVICTED
    assert "Evicted=True" in verdict.evidence and "Preempted" in verdict.evidence


def test_a_cache_miss_is_no_proof_the_api_server_is_asked():
    """The cache said: no Workload (so the old rule deleted a running head). The live
    read finds it admitted: nothing is removed."""
    head = running(c.ROLE_HEAD)
    verdict = confirm(head, o.workload(head, "admitted"), rc=raycluster(head))
    assert not verdict.justified and "admitted" in verdict.evidence
    verdict = confirm(head, None, rc=raycluster(head))
    assert not verdict.justified and "nothing proves" in verdict.evidence


def test_an_eviction_of_a_namesakes_workload_proves_nothing():
    pod = running()
    other = running(name=pod["metadata"]["name"])  # a namesake, another uid
    verdict = confirm(pod, o.workload(other, "evicted"))
    assert not verdict.justified


def test_a_namesake_or_a_pod_already_going_is_not_removed():
    pod = running()
    assert not confirm(pod, o.workload(pod, "evicted"), uid="another-uid").justified
    assert not confirm(None, None).justified
    going = o.pod(gated=False, phase="Running", deleting=True)
    assert not confirm(going, o.workload(going, "evicted")).justified


def test_a_gang_base_pod_goes_with_its_evicted_base_an_extra_does_not():
    pod = running()
    pod["metadata"]["labels"][c.GANG_LABEL] = "raycluster-gpu"
    base = o.workload(pod, "evicted")
    base["metadata"]["name"] = "raycluster-gpu-gang-1234"
    base["metadata"]["ownerReferences"] = [dict(pod["metadata"]["ownerReferences"][0],
                                                controller=True)]
    base["metadata"]["labels"][c.GANG_LABEL] = "raycluster-gpu"
    del base["metadata"]["labels"][c.POD_UID_LABEL]  # a base stands for no one pod
    assert confirm(pod, None, evidence=base).cause == removal.KUEUE_EVICTED
    # An extra (its own admitted Workload) is not covered by the base: reported.
    assert not confirm(pod, o.workload(pod, "admitted"), evidence=base).justified


# --- cause (b): outside quota past the grace ---------------------------------------------------


def test_outside_quota_past_the_grace_with_an_opted_in_raycluster_is_proof():
    pod = running()
    wl = o.workload(pod, "pending")
    verdict = confirm(pod, wl, rc=raycluster(pod))
    assert verdict.justified and verdict.cause == removal.OUTSIDE_QUOTA
    assert "grace of 120s" in verdict.evidence and "opts in" in verdict.evidence
    assert f"since {o.T1}" in verdict.evidence  # the same words every pass: reported once
    assert confirm(pod, wl, rc=raycluster(pod), now=LATE + 60) == verdict


@pytest.mark.parametrize(("why", "change"), [
    ("within the grace", lambda pod, wl, rc: (pod, wl, rc, EARLY)),
    ("RayCluster not read", lambda pod, wl, rc: (pod, wl, None, LATE)),
    ("RayCluster opted out", lambda pod, wl, rc: (pod, wl, raycluster(pod, "false"), LATE)),
    ("RayCluster without opt-in", lambda pod, wl, rc: (pod, wl, raycluster(pod, None), LATE)),
    ("RayCluster being deleted", lambda pod, wl, rc: (pod, wl, raycluster(pod, deleting=True),
                                                      LATE)),
    ("another RayCluster of that name", lambda pod, wl, rc: (
        pod, wl, {**rc, "metadata": {**rc["metadata"], "uid": "other"}}, LATE)),
    ("not ours", lambda pod, wl, rc: (pod, o.workload(pod, "pending", ours=False), rc, LATE)),
])
def test_outside_quota_is_not_proven_without_every_live_fact(why, change):
    pod = running()
    pod_, wl, rc, now = change(pod, o.workload(pod, "pending"), raycluster(pod))
    verdict = confirm(pod_, wl, rc=rc, now=now)
    assert not verdict.justified, why


def test_a_head_that_fits_is_never_removed():
    head = running(c.ROLE_HEAD)
    for state in ("admitted", "reserved"):
        wl = o.workload(head, state)
        if state == "reserved":
            # Quota reserved, admission checks pending: the clock restarts at that change.
            assert removal.outside_quota_left(head, wl, LATE, GRACE) == 0.0
            continue
        assert not confirm(head, wl, rc=raycluster(head)).justified


def test_a_gated_pod_or_a_gang_pod_is_never_outside_quota():
    gated = o.pod()
    assert removal.outside_quota_left(gated, o.workload(gated, "pending"), LATE, GRACE) is None
    gang = running()
    gang["metadata"]["labels"][c.GANG_LABEL] = "raycluster-gpu"
    assert removal.outside_quota_left(gang, o.workload(gang, "pending"), LATE, GRACE) is None


def test_the_grace_counts_from_the_last_admission_change():
    pod = running()
    wl = o.workload(pod, "pending")
    later = copy.deepcopy(wl)
    later["status"]["conditions"][0]["lastTransitionTime"] = "2026-12-02T10:40:15Z"
    assert removal.outside_quota_left(pod, wl, LATE, GRACE) == 0.0
    assert removal.outside_quota_left(pod, later, LATE, GRACE) > 3000


def test_workers_go_before_heads_lowest_priority_first():
    head = running(c.ROLE_HEAD)
    low = running()
    high = running()
    peers = [(head, o.workload(head, "pending", priority=1000)),
             (low, o.workload(low, "pending", priority=10)),
             (high, o.workload(high, "pending", priority=100))]
    rc = raycluster(head)
    head_v = confirm(head, peers[0][1], rc=rc, peers=peers)
    assert not head_v.justified and "workers go first" in head_v.evidence
    high_v = confirm(high, peers[2][1], rc=rc, peers=peers)
    assert not high_v.justified and "lower priority" in high_v.evidence
    assert confirm(low, peers[1][1], rc=rc, peers=peers).cause == removal.OUTSIDE_QUOTA
    # The low one gone (or admitted), the next; then the head.
    admitted = [peers[0], (low, o.workload(low, "admitted", priority=10)), peers[2]]
    assert confirm(high, peers[2][1], rc=rc, peers=admitted).justified
    workers_fit = [peers[0], (low, o.workload(low, "admitted")), (high, o.workload(high, "admitted"))]
    assert confirm(head, peers[0][1], rc=rc, peers=workers_fit).justified


def test_a_head_past_its_grace_waits_for_a_worker_still_within_its_own():
    """The head's Workload is the oldest of its cluster, so its grace ends first; it must
    still wait for a worker that runs outside quota but whose grace has time left (seen
    in a .ci/run under load: head, worker, worker instead of worker, worker, head)."""
    head = running(c.ROLE_HEAD)
    worker = running()
    younger = o.workload(worker, "pending")
    younger["metadata"]["creationTimestamp"] = time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(SINCE + 31))  # 30 s of its grace left at LATE
    peers = [(head, o.workload(head, "pending", priority=1000)), (worker, younger)]
    rc = raycluster(head)
    assert not removal.is_candidate(worker, younger, LATE, GRACE)
    verdict = confirm(head, peers[0][1], rc=rc, peers=peers)
    assert not verdict.justified and "workers go first" in verdict.evidence
    assert confirm(worker, younger, rc=rc, peers=peers).evidence.endswith("30s left")

# --- decide proposes, on the caches, the same rule ---------------------------------------------


def test_decide_reports_at_once_and_proposes_the_removal_once_the_grace_is_over():
    pod = running()
    wl = o.workload(pod, "pending")
    warn, wait = d.decide(pod, [wl], ctx(now=EARLY, outside_quota_grace=GRACE))
    assert warn.reason == a.WARN_UNGATED_NOT_ADMITTED and isinstance(wait, a.Wait)
    assert wait.after == pytest.approx(30.0)  # the loop looks again when the grace is over
    (evict,) = d.decide(pod, [wl], ctx(now=LATE, outside_quota_grace=GRACE))
    assert isinstance(evict, a.EvictPod) and evict.reason == a.OUTSIDE_QUOTA
    assert evict.workload == w.workload_name(pod) and not evict.head
    waiting = d.decide(pod, [wl], ctx(now=LATE, outside_quota_grace=GRACE,
                                      outside_quota_ahead="worker x goes first"))
    assert [type(x) for x in waiting] == [a.Warn, a.Wait]
    # A head hears nothing of its workers' deletion: it is looked at again shortly.
    assert waiting[1].after == d.OTHERS_RECHECK_SECONDS


def test_decide_without_a_clock_never_proposes_a_removal():
    """`raykueue explain` decides without a clock: it reports, it never proposes."""
    pod = running()
    (warn,) = d.decide(pod, [o.workload(pod, "pending")], ctx())
    assert warn.reason == a.WARN_UNGATED_NOT_ADMITTED


# --- quota held until the pod has stopped ---------------------------------------------------------


def test_has_stopped():
    pod = running()
    assert not removal.has_stopped(pod)  # bound, no container status yet: it may run
    pod["status"]["containerStatuses"] = [{"state": {"running": {}}}]
    assert not removal.has_stopped(pod)
    pod["status"]["containerStatuses"] = [{"state": {"terminated": {"exitCode": 0}}}]
    assert removal.has_stopped(pod)
    assert removal.has_stopped(o.pod())  # never bound to a node
    assert removal.has_stopped(o.pod(gated=False, phase="Failed"))
