"""The owner's `kueue.x-k8s.io/priority-class` label, as Kueue honours it, on the real stack.

Kueue gives a RayJob's Workload the WorkloadPriorityClass its own label names
(jobframework.WorkloadPriorityClassName reads the label of the object it makes
the Workload for). An opted-in RayJob labelled so, with KubeRay making its
RayCluster (it copies the RayJob's labels) and pods: every pod's Workload has
that class and its value, head and worker alike. Within the head-only rule: the
head class on the RayJob reaches its head only; its worker gets the worker
class. Watched with QuotaInvariants; every state is waited for.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from raykueue.controller import workload as w
from raykueue.core import contract as c
from testkit.e2e.controller import (  # noqa: F401 - fixtures
    WPCS,
    admin,
    controller,
    describe,
    queue,
    role,
    settled,
    webhooks,
)
from testkit.e2e.kueue_shipped import RAYJOBS, _owned_cluster
from testkit.e2e.rayjob_sample import CODE_SAMPLE, CONFIG_MAPS, DOCUMENTED
from testkit.quota_invariants import QuotaInvariants
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture

TEAM_VALUE = 777


@pytest.fixture
def team_class(admin, new_namespace) -> Iterator[str]:  # noqa: F811
    name = f"e2e-team-{new_namespace('wpc')}"
    admin.create(WPCS.path(), {"apiVersion": WPCS.api_version, "kind": "WorkloadPriorityClass",
                               "metadata": {"name": name}, "value": TEAM_VALUE})
    yield name
    admin.delete(WPCS.path(None, name))


def labelled_rayjob(priority_class: str) -> dict[str, Any]:
    """The documented RayJob, opted in, queued, its priority named where Kueue reads it.
    HTTPMode: no submitter pod (its slot is tests/e2e/test_rayjob_submitter.py's)."""
    job = copy.deepcopy(DOCUMENTED)
    job["metadata"]["labels"] = {c.QUEUE_LABEL: "team-a", c.PRIORITY_CLASS_LABEL: priority_class}
    job["metadata"]["annotations"] = {c.STANDALONE_ANNOTATION: "true"}
    job["spec"]["submissionMode"] = "HTTPMode"
    return job


def classes_of(admin, ns: str, priority_class: str) -> dict[str, tuple[str | None, int]]:  # noqa: F811
    """Run the labelled RayJob until head and worker are admitted and running; each pod's
    Workload's (class, value) by role."""
    admin.create(CONFIG_MAPS.path(ns), CODE_SAMPLE)
    name = DOCUMENTED["metadata"]["name"]
    with QuotaInvariants(admin, [ns], quota_namespaces=[ns], cluster_queues=[f"e2e-{ns}"]) as inv:
        admin.create(RAYJOBS.path(ns), labelled_rayjob(priority_class))
        cluster = _owned_cluster(admin, ns, "RayJob", name)
        s = inv.wait(settled(admin, ns, cluster, 1, 0), timeout=120, message=describe(admin, ns, cluster))
        out = {}
        for pod in s["pods"]:
            (wl,) = s["owned"][pod["metadata"]["uid"]]
            assert w.is_admitted(wl)
            out[role(pod)] = (w.priority_class_name(wl), w.priority_value(wl))
        inv.sweep()
        admin.delete(RAYJOBS.path(ns, name))
        inv.raise_if_broken()
    return out


def test_the_rayjobs_class_is_every_pods_class(admin, controller, queue, team_class):  # noqa: F811
    ns = queue(cpu="2", memory="3Gi")
    assert classes_of(admin, ns, team_class) == {"head": (team_class, TEAM_VALUE),
                                                  "worker": (team_class, TEAM_VALUE)}


def test_the_head_class_on_the_rayjob_reaches_its_head_only(admin, controller, queue):  # noqa: F811
    ns = queue(cpu="2", memory="3Gi")
    got = classes_of(admin, ns, c.DEFAULT_HEAD_PRIORITY_CLASS)
    assert got["head"][0] == c.DEFAULT_HEAD_PRIORITY_CLASS
    assert got["worker"][0] == c.DEFAULT_WORKER_PRIORITY_CLASS
    assert got["head"][1] > got["worker"][1]
