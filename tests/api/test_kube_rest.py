"""kube.client, kube.rest, kube.resources and kube.events against the real API server.

What fakes cannot prove: the media types and query spellings the server
accepts, the Status bodies it answers with, and what Event validation allows.
"""

from __future__ import annotations

import time

import pytest

from raykueue.kube.client import load_api_client
from raykueue.kube.events import WARNING, EventRecorder
from raykueue.kube.resources import EVENTS_V1, NAMESPACES, Resource, served_versions
from raykueue.kube.rest import ApiError, Rest
from testkit.waiting import within

CONFIGMAPS = Resource("", "v1", "configmaps")


@pytest.fixture
def rest(k8s) -> Rest:
    return Rest(k8s)


def configmap(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def test_load_api_client_from_the_stack_kubeconfig(kubeconfig) -> None:
    client = load_api_client(str(kubeconfig))
    assert client is not None
    assert Rest(client).get("/version")["major"] == "1"


def test_verbs_round_trip(rest: Rest, new_namespace) -> None:
    ns = new_namespace("kube-rest")
    created = rest.create(CONFIGMAPS.path(ns), configmap("a", x="1"))
    assert created["metadata"]["uid"]
    path = CONFIGMAPS.path(ns, "a")

    patched = rest.merge_patch(path, {"data": {"y": "2"}})
    assert patched["data"] == {"x": "1", "y": "2"}
    patched = rest.json_patch(path, [{"op": "remove", "path": "/data/x"}])
    assert patched["data"] == {"y": "2"}

    applied = rest.apply(path, configmap("a", z="3"), field_manager="kube-test")
    assert applied["data"]["z"] == "3"
    managers = {m["manager"] for m in applied["metadata"]["managedFields"]}
    assert "kube-test" in managers

    listed = rest.get(CONFIGMAPS.path(ns), {"labelSelector": "nothing=here"})
    assert listed["items"] == []

    rest.delete(path)
    with pytest.raises(ApiError) as info:
        rest.get(path)
    assert info.value.is_not_found and info.value.reason == "NotFound"


def test_apply_creates_when_absent(rest: Rest, new_namespace) -> None:
    ns = new_namespace("kube-rest")
    rest.apply(CONFIGMAPS.path(ns, "fresh"), configmap("fresh", a="b"), field_manager="kube-test")
    assert rest.get(CONFIGMAPS.path(ns, "fresh"))["data"] == {"a": "b"}


def test_error_classification_matches_the_server(rest: Rest, new_namespace) -> None:
    ns = new_namespace("kube-rest")
    rest.create(CONFIGMAPS.path(ns), configmap("dup"))
    with pytest.raises(ApiError) as info:
        rest.create(CONFIGMAPS.path(ns), configmap("dup"))
    assert info.value.is_already_exists and not info.value.is_conflict

    stale = rest.get(CONFIGMAPS.path(ns, "dup"))
    rest.merge_patch(CONFIGMAPS.path(ns, "dup"), {"data": {"moved": "on"}})
    stale["data"] = {"stale": "write"}
    with pytest.raises(ApiError) as info:
        rest.replace(CONFIGMAPS.path(ns, "dup"), stale)
    assert info.value.is_conflict and not info.value.is_already_exists

    with pytest.raises(ApiError) as info:
        rest.json_patch(CONFIGMAPS.path(ns, "dup"),
                        [{"op": "test", "path": "/data/moved", "value": "elsewhere"}])
    assert info.value.status == 422


def test_served_versions_uses_discovery(rest: Rest) -> None:
    assert served_versions(rest, "coordination.k8s.io")[0] == "v1"
    assert served_versions(rest, "") == ["v1"]
    assert served_versions(rest, "no-such-group.example.io") == []


def test_watch_stream_delivers_events(rest: Rest, new_namespace) -> None:
    ns = new_namespace("kube-rest")
    rv = rest.get(CONFIGMAPS.path(ns))["metadata"]["resourceVersion"]
    rest.create(CONFIGMAPS.path(ns), configmap("w"))
    with rest.watch(CONFIGMAPS.path(ns), {"resourceVersion": rv}, timeout_seconds=5) as stream:
        for event in stream:
            assert event["type"] == "ADDED"
            assert event["object"]["metadata"]["name"] == "w"
            break


def test_watch_ends_when_the_server_times_it_out(rest: Rest, new_namespace) -> None:
    ns = new_namespace("kube-rest")
    started = time.monotonic()
    quiet = {"labelSelector": "nothing=here"}
    with rest.watch(CONFIGMAPS.path(ns), quiet, timeout_seconds=1) as stream:
        assert list(stream) == []
    # Our read timeout would end it only at 16 s: ending sooner is the server's doing.
    assert time.monotonic() - started < within(1)


def test_events_are_accepted_by_validation(rest: Rest, new_namespace) -> None:
    ns = new_namespace("kube-events")
    obj = rest.create(CONFIGMAPS.path(ns), configmap("regarded"))
    obj.setdefault("apiVersion", "v1")
    obj.setdefault("kind", "ConfigMap")
    recorder = EventRecorder(rest, "example.io/kube-test")
    recorder.record(obj, WARNING, "Tested", "é" * 900, action="Check")

    events = rest.get(EVENTS_V1.path(ns))["items"]
    assert len(events) == 1
    ev = events[0]
    assert ev["regarding"]["uid"] == obj["metadata"]["uid"]
    assert (ev["type"], ev["reason"], ev["action"]) == ("Warning", "Tested", "Check")
    assert ev["reportingController"] == "example.io/kube-test"
    assert len(ev["note"].encode()) <= 1024


def test_event_about_a_cluster_scoped_object(rest: Rest, new_namespace) -> None:
    ns_obj = rest.get(NAMESPACES.path(name=new_namespace("kube-events")))
    ns_obj.update(apiVersion="v1", kind="Namespace")
    EventRecorder(rest, "example.io/kube-test").record(ns_obj, "Normal", "Seen", "cluster scoped")
    selector = f"regarding.name={ns_obj['metadata']['name']}"
    found = rest.get(EVENTS_V1.path("default"), {"fieldSelector": selector})["items"]
    assert [e["reason"] for e in found] == ["Seen"]
    for e in found:
        rest.delete(EVENTS_V1.path("default", e["metadata"]["name"]))
