"""testkit/raycluster.py's pure parts: the same RayCluster queued each way, and the quota a
Workload holds (bench/elastic.py compares the ways with them)."""

from __future__ import annotations

import pytest

from raykueue.core import contract as c
from testkit import raycluster as rc


def test_every_way_runs_the_same_cluster_but_for_how_it_is_queued() -> None:
    bodies = {way: rc.for_way(rc.raycluster("rc", min_workers=1), way) for way in rc.WAYS}
    assert all(b["spec"] == bodies["raykueue"]["spec"] for b in bodies.values())
    meta = {way: b["metadata"] for way, b in bodies.items()}
    assert all(m["labels"][c.QUEUE_LABEL] == "team-a" for m in meta.values())
    for way in ("raykueue", "raykueue-gang"):
        assert meta[way]["annotations"][c.STANDALONE_ANNOTATION] == "true"
        assert rc.ELASTIC_ANNOTATION not in meta[way]["annotations"]
        assert c.PRIORITY_CLASS_LABEL not in meta[way]["labels"]  # raykueue's per-role classes
    assert meta["raykueue-gang"]["annotations"][c.GANG_ANNOTATION] == "true"
    assert c.GANG_ANNOTATION not in meta["raykueue"]["annotations"]
    for way in ("kueue-elastic", "kueue-partial"):
        assert c.STANDALONE_ANNOTATION not in meta[way]["annotations"]  # Kueue's, not raykueue's
        assert meta[way]["annotations"][rc.ELASTIC_ANNOTATION] == "true"
        assert meta[way]["labels"][c.PRIORITY_CLASS_LABEL] == "ray-head"
    assert meta["kueue-partial"]["annotations"][rc.SCALE_UP_ANNOTATION] == "partial"
    assert rc.SCALE_UP_ANNOTATION not in meta["kueue-elastic"]["annotations"]
    with pytest.raises(ValueError, match="unknown way"):
        rc.for_way(rc.raycluster("rc"), "kueue")


def workload(name: str, *cpus: str, reserved: bool = True, finished: bool = False) -> dict:
    conditions = [{"type": "QuotaReserved", "status": "True" if reserved else "False"}]
    if finished:
        conditions.append({"type": "Finished", "status": "True"})
    return {"metadata": {"name": name},
            "status": {"conditions": conditions, "admission": {"podSetAssignments": [
                {"name": f"ps{i}", "resourceUsage": {"cpu": cpu}} for i, cpu in enumerate(cpus)]}}}


def test_reserved_cpu_counts_only_reservations_that_hold() -> None:
    assert rc.reserved_cpu(workload("raycluster-first-1", "1", "3")) == 4000
    assert rc.reserved_cpu(workload("first-head-x", "750m")) == 750
    assert rc.reserved_cpu(workload("first-head-x", "1", reserved=False)) == 0
    assert rc.reserved_cpu(workload("first-head-x", "1", finished=True)) == 0


def test_a_workload_is_the_clusters_whoever_made_it() -> None:
    for name in ("first-head-abcde-1234", "first-gang-99", "raycluster-first-7f3a"):
        assert rc.workload_is_of({"metadata": {"name": name}}, "first")
    for name in ("firstly-head-1", "raycluster-second-1", "job-urgent-1"):
        assert not rc.workload_is_of({"metadata": {"name": name}}, "first")


def test_reserved_cpu_follows_a_count_lowered_in_place_and_reclaimable_pods() -> None:
    """Kueue's elastic scale-down lowers spec.podSets[].count of the admitted slice; a gang
    base hands slots back through status.reclaimablePods: either way Kueue counts less."""
    wl = workload("raycluster-first-1", "1", "3")
    wl["spec"] = {"podSets": [{"name": "ps0", "count": 1}, {"name": "ps1", "count": 3}]}
    wl["status"]["admission"]["podSetAssignments"][1]["count"] = 3
    assert rc.reserved_cpu(wl) == 4000
    wl["spec"]["podSets"][1]["count"] = 1  # scaled down from 3 workers to 1
    assert rc.reserved_cpu(wl) == 2000
    wl["spec"]["podSets"][1]["count"] = 3
    wl["status"]["reclaimablePods"] = [{"name": "ps1", "count": 2}]
    assert rc.reserved_cpu(wl) == 2000
