"""kube.rest: error mapping, encoding, and real HTTP through the kubernetes client.

The HTTP tests run a loopback server so that the exact bytes the generated
client puts on the wire (headers, bodies, query) are checked, not assumed.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
from kubernetes.client import ApiClient, Configuration

from raykueue.kube.rest import ApiError, Rest, WatchStream, encode_query, get_or_none
from testkit.waiting import wait_for, within


class Recorded:
    def __init__(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        self.method, self.path, self.headers, self.body = method, path, headers, body


Responder = Callable[["Handler"], None]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.requests.append(
            Recorded(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                     body))
        self.server.responder(self)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

    def send_json(self, status: int, obj: Any) -> None:
        data = orjson.dumps(obj)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.requests: list[Recorded] = []
        self.responder: Responder = lambda h: h.send_json(200, {"ok": True})


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def rest(server: Server) -> Rest:
    config = Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
    config.api_key = {"BearerToken": "s3cret"}
    config.api_key_prefix = {"BearerToken": "Bearer"}
    return Rest(ApiClient(config), timeout=5)


# -- ApiError ------------------------------------------------------------------

def test_api_error_helpers_follow_status_and_reason() -> None:
    assert ApiError(404, "NotFound").is_not_found
    exists = ApiError(409, "AlreadyExists")
    assert exists.is_already_exists and not exists.is_conflict
    stale = ApiError(409, "Conflict")
    assert stale.is_conflict and not stale.is_already_exists
    assert ApiError(410, "Expired").is_gone
    assert ApiError(0, "ConnectionError").is_transient
    assert ApiError(503, "ServiceUnavailable").is_transient
    assert not ApiError(422, "Invalid").is_transient


def test_api_error_from_status_body_prefers_kubernetes_reason() -> None:
    body = orjson.dumps({"kind": "Status", "reason": "AlreadyExists", "message": "pods x exists",
                         "code": 409})
    err = ApiError.from_status(409, "Conflict", body)
    assert err.reason == "AlreadyExists"
    assert err.message == "pods x exists"
    assert str(err) == "409 AlreadyExists: pods x exists"


def test_api_error_from_non_json_body_keeps_text() -> None:
    err = ApiError.from_status(502, "Bad Gateway", b"<html>upstream</html>")
    assert err.reason == "Bad Gateway"
    assert err.message == "<html>upstream</html>"


def test_api_error_from_watch_status_object() -> None:
    err = ApiError.from_status_object({"kind": "Status", "code": 410, "reason": "Expired",
                                       "message": "too old resource version"})
    assert err.is_gone and err.reason == "Expired"


def test_encode_query_spells_booleans_like_the_api() -> None:
    assert encode_query({"watch": True, "force": False, "limit": 5}) == \
        "watch=true&force=false&limit=5"
    assert encode_query({"labelSelector": "a=b,c in (d)"}) == \
        "labelSelector=a%3Db%2Cc+in+%28d%29"
    assert encode_query(None) == ""


# -- HTTP through the generated client -------------------------------------------

def test_get_sends_bearer_token_and_parses_json(server: Server, rest: Rest) -> None:
    server.responder = lambda h: h.send_json(200, {"kind": "Pod", "n": 1})
    assert rest.get("/api/v1/pods", {"limit": 2}) == {"kind": "Pod", "n": 1}
    req = server.requests[-1]
    assert (req.method, req.path) == ("GET", "/api/v1/pods?limit=2")
    assert req.headers["authorization"] == "Bearer s3cret"
    assert req.headers["accept"] == "application/json"


def test_create_posts_json(server: Server, rest: Rest) -> None:
    rest.create("/api/v1/namespaces/a/pods", {"metadata": {"name": "p"}})
    req = server.requests[-1]
    assert req.method == "POST"
    assert req.headers["content-type"] == "application/json"
    assert orjson.loads(req.body) == {"metadata": {"name": "p"}}


def test_json_patch_keeps_its_media_type(server: Server, rest: Rest) -> None:
    ops = [{"op": "remove", "path": "/spec/schedulingGates/0"}]
    rest.json_patch("/api/v1/namespaces/a/pods/p", ops)
    req = server.requests[-1]
    assert req.method == "PATCH"
    assert req.headers["content-type"] == "application/json-patch+json"
    assert orjson.loads(req.body) == ops


def test_merge_patch(server: Server, rest: Rest) -> None:
    rest.merge_patch("/x", {"metadata": {"labels": {"a": None}}})
    req = server.requests[-1]
    assert req.headers["content-type"] == "application/merge-patch+json"
    assert orjson.loads(req.body) == {"metadata": {"labels": {"a": None}}}


def test_apply_is_server_side_apply_with_json_body(server: Server, rest: Rest) -> None:
    rest.apply("/apis/g/v1/namespaces/a/things/t", {"apiVersion": "g/v1", "kind": "Thing"},
               field_manager="me")
    req = server.requests[-1]
    assert req.method == "PATCH"
    assert req.path == "/apis/g/v1/namespaces/a/things/t?fieldManager=me&force=true"
    assert req.headers["content-type"] == "application/apply-patch+yaml"
    assert orjson.loads(req.body) == {"apiVersion": "g/v1", "kind": "Thing"}


def test_delete_without_body_and_empty_response(server: Server, rest: Rest) -> None:
    def empty(h: Handler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", "0")
        h.end_headers()

    server.responder = empty
    assert rest.delete("/api/v1/namespaces/a/pods/p") is None
    assert server.requests[-1].method == "DELETE"


def test_non_json_answers_come_back_as_text(server: Server, rest: Rest) -> None:
    def text(h: Handler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/plain; charset=utf-8")
        h.send_header("Content-Length", "2")
        h.end_headers()
        h.wfile.write(b"ok")

    server.responder = text
    assert rest.request("GET", "/healthz") == "ok"


def test_error_status_raises_api_error(server: Server, rest: Rest) -> None:
    server.responder = lambda h: h.send_json(
        404, {"kind": "Status", "reason": "NotFound", "message": "pods \"p\" not found"})
    with pytest.raises(ApiError) as info:
        rest.get("/api/v1/namespaces/a/pods/p")
    assert info.value.is_not_found
    # The connection went back to the pool in a usable state.
    server.responder = lambda h: h.send_json(200, {"ok": 1})
    assert rest.get("/ok") == {"ok": 1}


def test_unreachable_server_is_status_zero() -> None:
    config = Configuration(host="http://127.0.0.1:9")  # discard port: nothing listens
    config.retries = False
    with pytest.raises(ApiError) as info:
        Rest(ApiClient(config), timeout=2).get("/version")
    assert info.value.status == 0 and info.value.is_transient


def _chunked(h: Handler, pieces: list[bytes], pause: float = 0.0,
             hold: threading.Event | None = None) -> None:
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Transfer-Encoding", "chunked")
    h.end_headers()
    for piece in pieces:
        h.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        h.wfile.flush()
        time.sleep(pause)
    if hold is not None:
        hold.wait(60)
    h.wfile.write(b"0\r\n\r\n")


def test_watch_yields_events_split_across_chunks(server: Server, rest: Rest) -> None:
    one = orjson.dumps({"type": "ADDED", "object": {"metadata": {"name": "a"}}})
    two = orjson.dumps({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}})
    pieces = [one[:10], one[10:] + b"\n" + two[:5], two[5:] + b"\n"]
    server.responder = lambda h: _chunked(h, pieces, pause=0.01)
    with rest.watch("/api/v1/pods", {"resourceVersion": "5"}, timeout_seconds=30) as stream:
        events = list(stream)
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    assert server.requests[-1].path == \
        "/api/v1/pods?resourceVersion=5&watch=true&timeoutSeconds=30"


def test_watch_close_from_another_thread_unblocks_reader(server: Server, rest: Rest) -> None:
    hold = threading.Event()
    first = orjson.dumps({"type": "ADDED", "object": {}}) + b"\n"
    server.responder = lambda h: _chunked(h, [first], hold=hold)
    stream = rest.watch("/api/v1/pods")
    seen: list[dict[str, Any]] = []
    done = threading.Event()

    def read() -> None:
        seen.extend(stream)
        done.set()

    threading.Thread(target=read, daemon=True).start()
    wait_for(lambda: seen, timeout=within(1), message="the first event")  # then it blocks
    stream.close()
    # The server holds the stream open until the test ends: only close() can end the read.
    assert done.wait(within(1)), "reader stayed blocked after close()"
    assert len(seen) == 1
    hold.set()


def test_watch_open_error_raises(server: Server, rest: Rest) -> None:
    server.responder = lambda h: h.send_json(
        410, {"kind": "Status", "reason": "Expired", "code": 410})
    with pytest.raises(ApiError) as info:
        rest.watch("/api/v1/pods", {"resourceVersion": "1"})
    assert info.value.is_gone


class _FakeResponse:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def read1(self, amt: int) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""

    def shutdown(self) -> None: ...
    def close(self) -> None: ...
    def release_conn(self) -> None: ...


def test_watch_stream_parses_unterminated_last_line() -> None:
    stream = WatchStream(_FakeResponse([b'{"type":"A"}\n\n{"type"', b':"B"}']))  # type: ignore[arg-type]
    assert [e["type"] for e in stream] == ["A", "B"]
    assert stream.closed


class _Answers:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def get(self, path: str) -> Any:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_get_or_none_answers_404_as_none_and_raises_any_other_failure() -> None:
    assert get_or_none(_Answers({"kind": "Pod"}), "/p") == {"kind": "Pod"}
    assert get_or_none(_Answers(ApiError(404, "NotFound")), "/p") is None
    for failure in (ApiError(403, "Forbidden"), ApiError(500, "Internal"), TimeoutError("slow")):
        with pytest.raises(type(failure)):
            get_or_none(_Answers(failure), "/p")
