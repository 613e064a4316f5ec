"""coexist.watcher.KueueWatch against the real API server: Kueue's ConfigMap changes, findings follow.

A namespace of the test's own stands in for kueue-system, so the ConfigMap is
the test's alone; what the watcher reads (the ConfigMap by name through a field
selector, the webhook configurations) and writes (an Event on that ConfigMap)
goes through the real API server.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from raykueue.coexist.metrics import KUEUE_OVERLAP
from raykueue.coexist.watcher import CONFIG_MAPS, KueueWatch, read_findings
from raykueue.kube.events import EventRecorder
from raykueue.kube.resources import Resource
from raykueue.kube.rest import Rest
from testkit.waiting import wait_for
from tests.stackfixtures import new_namespace  # noqa: F401 - fixture

EVENTS = Resource("events.k8s.io", "v1", "events")
NAME = "kueue-manager-config"


def config(**fields) -> dict[str, str]:
    cfg = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
           "integrations": {"frameworks": ["ray.io/raycluster", "pod"]}, **fields}
    return {"controller_manager_config.yaml": yaml.safe_dump(cfg)}


@pytest.fixture
def rest(k8s) -> Rest:
    return Rest(k8s)


@pytest.fixture
def watch(rest: Rest, new_namespace) -> Iterator[tuple[KueueWatch, str]]:  # noqa: F811
    ns = new_namespace("kueue")
    kw = KueueWatch(rest, ns, NAME, EventRecorder(rest, "raykueue.io/coexist")).start()
    yield kw, ns
    kw.stop()


def kinds(kw: KueueWatch) -> set[str]:
    return {f.kind for f in kw.snapshot.findings}


def test_a_change_to_kueues_configuration_is_found_reported_and_cleared(rest: Rest, watch) -> None:
    kw, ns = watch
    wait_for(lambda: kw.probe()[0], timeout=30, message="the watcher's caches to sync")
    assert kw.snapshot.setup.source.startswith("assumed")  # no ConfigMap yet: Kueue as shipped

    rest.create(CONFIG_MAPS.path(ns), {"metadata": {"name": NAME},
                                       "data": config(manageJobsWithoutQueueName=True)})
    wait_for(lambda: "KueueManagesJobsWithoutQueue" in kinds(kw), timeout=30,
             message=lambda: f"the finding; have {kinds(kw)}")
    assert KUEUE_OVERLAP.labels("KueueManagesJobsWithoutQueue")._value.get() == 1
    ok, detail = kw.probe()
    assert ok and "manageJobsWithoutQueueName" in detail  # reported, never unready for it

    def event() -> dict | None:
        items = rest.get(EVENTS.path(ns))["items"]
        return next((e for e in items if e.get("reason") == "KueueManagesJobsWithoutQueue"), None)

    recorded = wait_for(event, timeout=30, message="a Warning Event on Kueue's ConfigMap")
    assert recorded["type"] == "Warning" and recorded["regarding"]["name"] == NAME
    assert "namespaces" in recorded["note"]
    assert "KueueManagesJobsWithoutQueue" in {f.kind for f in read_findings(rest, ns, NAME)}

    rest.merge_patch(CONFIG_MAPS.path(ns, NAME), {"data": config()})
    wait_for(lambda: "KueueManagesJobsWithoutQueue" not in kinds(kw), timeout=30,
             message=lambda: f"the finding gone; have {kinds(kw)}")
    assert KUEUE_OVERLAP.labels("KueueManagesJobsWithoutQueue")._value.get() == 0
    assert kw.snapshot.setup.wait_for_pods_ready and kw.snapshot.setup.ray_kinds == {"RayCluster"}
