"""coexist.watcher.KueueWatch against the real API server: Kueue's ConfigMap changes, findings follow.

A namespace of the test's own stands in for kueue-system, so the ConfigMap is
the test's alone; what the watcher reads (the ConfigMap by name through a field
selector, the webhook configurations) and writes (an Event on that ConfigMap)
goes through the real API server.
"""

from __future__ import annotations

import contextlib
import copy
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from raykueue.coexist.metrics import KUEUE_OVERLAP
from raykueue.coexist.watcher import CONFIG_MAPS, KueueWatch, read_findings
from raykueue.kube.events import EventRecorder
from raykueue.kube.resources import Resource
from raykueue.kube.rest import ApiError, Rest
from testkit.api.chart import template as chart_template
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.waiting import wait_for

EVENTS = Resource("events.k8s.io", "v1", "events")
NAME = "kueue-manager-config"
RBAC = Path(__file__).resolve().parents[2] / "manifests" / "rbac.yaml"


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


def ready_detail(kw: KueueWatch) -> str:
    """What /readyz says of Kueue once the watcher is ready (never unready for a finding)."""
    def detail() -> str | None:
        ok, text = kw.probe()
        return text if ok else None
    return wait_for(detail, timeout=30, message=lambda: f"the watcher ready; it says {kw.probe()}")


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


def test_a_configuration_that_is_not_there_is_a_finding_not_a_silent_default(rest: Rest,
                                                                            watch) -> None:
    kw, ns = watch
    detail = ready_detail(kw)
    assert "KueueConfigurationUnread" in kinds(kw)
    assert f"ConfigMap {ns}/{NAME}" in detail and "not found" in detail
    assert "RAYKUEUE_KUEUE_CONFIG_MAP" in detail
    assert KUEUE_OVERLAP.labels("KueueConfigurationUnread")._value.get() == 1
    assert "KueueConfigurationUnread" in {f.kind for f in read_findings(rest, ns, NAME)}

    rest.create(CONFIG_MAPS.path(ns), {"metadata": {"name": NAME}, "data": config()})
    wait_for(lambda: "KueueConfigurationUnread" not in kinds(kw), timeout=30,
             message=lambda: f"the finding gone once the ConfigMap exists; have {kinds(kw)}")
    assert KUEUE_OVERLAP.labels("KueueConfigurationUnread")._value.get() == 0
    assert kw.snapshot.setup.source == f"ConfigMap {ns}/{NAME}"


HELM_NAME = "queues-kueue-manager-config"  # Kueue's Helm chart, release "queues"


@pytest.fixture
def as_raykueue(k8s, rest: Rest) -> Iterator[Callable[[list[dict[str, Any]]], Rest]]:
    """as_raykueue(docs) -> a client holding the ClusterRole `raykueue` of those documents."""
    from kubernetes import client

    made: list[str] = []
    clients: list[Any] = []
    base = "/apis/rbac.authorization.k8s.io/v1"

    def holding(docs: list[dict[str, Any]]) -> Rest:
        user = f"raykueue-coexist-{uuid.uuid4().hex[:8]}"
        role = copy.deepcopy(next(d for d in docs if d["kind"] == "ClusterRole"
                                  and d["metadata"]["name"] == "raykueue"))
        role["metadata"] = {"name": user}
        rest.create(f"{base}/clusterroles", role)
        made.append(f"{base}/clusterroles/{user}")
        rest.create(f"{base}/clusterrolebindings", {
            "metadata": {"name": user},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
        made.append(f"{base}/clusterrolebindings/{user}")
        impersonating = client.ApiClient(k8s.configuration)
        impersonating.set_default_header("Impersonate-User", user)
        clients.append(impersonating)
        return Rest(impersonating)

    yield holding
    for api in clients:
        api.close()
    for path in reversed(made):
        with contextlib.suppress(ApiError):
            rest.delete(path)


def test_kueue_installed_by_helm_is_read_once_named_and_a_finding_until_then(
        rest: Rest, new_namespace, as_raykueue) -> None:  # noqa: F811
    """Kueue's Helm chart, release "queues": its Configuration is ConfigMap
    queues-kueue-manager-config. Named by the setting but not by the shipped RBAC,
    it is a forbidden read: a finding, never a replica that stays unready. The
    chart, given the name once (kueue.configMap), sets both and it is read."""
    ns = new_namespace("kueue")
    rest.create(CONFIG_MAPS.path(ns), {"metadata": {"name": HELM_NAME},
                                       "data": config(manageJobsWithoutQueueName=True)})
    shipped = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    kw = KueueWatch(as_raykueue(shipped), ns, HELM_NAME).start()
    try:
        detail = ready_detail(kw)
        assert "KueueConfigurationUnread" in kinds(kw)
        assert "not readable" in detail and "forbidden" in detail.lower()
        assert kw.snapshot.setup.source.startswith("assumed")
    finally:
        kw.stop()

    chart = chart_template(ns, f"kueue.namespace={ns}", f"kueue.configMap={HELM_NAME}")
    kw = KueueWatch(as_raykueue(chart), ns, HELM_NAME).start()
    try:
        wait_for(lambda: "KueueManagesJobsWithoutQueue" in kinds(kw), timeout=30,
                 message=lambda: f"the Configuration read; /readyz says {kw.probe()}")
        assert "KueueConfigurationUnread" not in kinds(kw)
        assert kw.snapshot.setup.source == f"ConfigMap {ns}/{HELM_NAME}"
    finally:
        kw.stop()
