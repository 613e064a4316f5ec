"""kube.events: the Event body and the never-raise contract."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from raykueue.kube.events import NOTE_MAX_BYTES, EventRecorder, event_body, truncate_utf8
from raykueue.kube.rest import ApiError

POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"namespace": "team-a", "name": "ray-worker-x", "uid": "u-1",
                    "resourceVersion": "42", "labels": {"a": "b"}}}
NOW = datetime(2024, 5, 1, 12, 0, 0, 7, tzinfo=UTC)


def body(obj: dict[str, Any] = POD, message: str = "queued", **kw: Any) -> dict[str, Any]:
    return event_body(obj, kw.pop("type", "Normal"), kw.pop("reason", "Gated"), message,
                      action=kw.pop("action", None), controller="example.io/ctl",
                      instance="host-1", now=NOW, unique=0xABC)


def test_event_body_shape() -> None:
    ev = body(action="Gate")
    assert ev["apiVersion"] == "events.k8s.io/v1" and ev["kind"] == "Event"
    assert ev["metadata"] == {"name": "ray-worker-x.abc", "namespace": "team-a"}
    assert ev["eventTime"] == "2024-05-01T12:00:00.000007Z"
    assert ev["regarding"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "team-a",
                               "name": "ray-worker-x", "uid": "u-1", "resourceVersion": "42"}
    assert (ev["type"], ev["reason"], ev["action"], ev["note"]) == \
        ("Normal", "Gated", "Gate", "queued")
    assert ev["reportingController"] == "example.io/ctl"
    assert ev["reportingInstance"] == "host-1"


def test_action_defaults_to_reason() -> None:
    assert body()["action"] == "Gated"


def test_cluster_scoped_object_events_go_to_default() -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "u"}}
    ev = body(node)
    assert ev["metadata"]["namespace"] == "default"
    assert "namespace" not in ev["regarding"]


def test_note_truncated_to_1kib_without_splitting_characters() -> None:
    long = "é" * 1000  # 2000 bytes
    note = body(message=long)["note"]
    assert len(note.encode()) <= NOTE_MAX_BYTES
    assert note == "é" * 512
    assert truncate_utf8("abc", 2) == "ab"
    assert truncate_utf8("a€", 3) == "a"  # the euro sign needs 3 bytes


def test_long_names_stay_valid() -> None:
    obj = {"kind": "Pod", "apiVersion": "v1", "metadata": {"namespace": "n", "name": "x" * 253}}
    assert len(body(obj)["metadata"]["name"]) <= 253


class Recorder:
    def __init__(self, error: Exception | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.error = error

    def create(self, path: str, body: dict[str, Any], query: Any = None, *,
               timeout: Any = None) -> None:
        self.calls.append((path, body))
        if self.error:
            raise self.error


def test_record_posts_to_the_objects_namespace() -> None:
    rest = Recorder()
    EventRecorder(rest, "example.io/ctl", instance="me").record(  # type: ignore[arg-type]
        POD, "Warning", "Preempted", "evicted by kueue")
    [(path, ev)] = rest.calls
    assert path == "/apis/events.k8s.io/v1/namespaces/team-a/events"
    assert ev["type"] == "Warning" and ev["reportingInstance"] == "me"


@pytest.mark.parametrize("error", [ApiError(403, "Forbidden"), RuntimeError("socket gone")])
def test_record_never_raises(error: Exception, caplog: pytest.LogCaptureFixture) -> None:
    rest = Recorder(error)
    with caplog.at_level(logging.WARNING, logger="raykueue.kube.events"):
        EventRecorder(rest, "c").record(POD, "Normal", "R", "m")  # type: ignore[arg-type]
    assert "not recorded" in caplog.text
