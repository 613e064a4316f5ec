"""Path-based JSON calls through the kubernetes client's connection pool.

The generated typed API is slow (model (de)serialisation) and knows nothing
about custom resources; we only need its configuration, auth and pool. Every
call goes through `ApiClient.param_serialize` (auth headers, token refresh for
in-cluster and exec credentials) and `ApiClient.call_api` (TLS, proxies).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Protocol
from urllib.parse import urlencode

import orjson
import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

JSON = "application/json"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

QueryValue = str | int | bool
Query = Mapping[str, QueryValue] | None
Timeout = float | tuple[float, float] | None


class ApiError(Exception):
    """A failed API call.

    `status` is the HTTP status, or 0 when no response arrived (connection
    refused, TLS failure, timeout). `reason` is the machine-readable reason of
    a Kubernetes Status body when there is one (`NotFound`, `AlreadyExists`,
    `Conflict`, `Expired`...), else the HTTP reason phrase.
    """

    def __init__(self, status: int, reason: str, body: dict[str, Any] | None = None) -> None:
        self.status = status
        self.reason = reason
        self.body = body
        detail = f": {self.message}" if self.message else ""
        super().__init__(f"{status} {reason}{detail}")

    @property
    def message(self) -> str:
        if self.body and isinstance(self.body.get("message"), str):
            return self.body["message"]
        return ""

    @property
    def is_not_found(self) -> bool:
        return self.status == 404

    @property
    def is_already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def is_conflict(self) -> bool:
        # The API server answers 409 both for a stale resourceVersion and for a
        # create of an existing name; callers retry only the first.
        return self.status == 409 and not self.is_already_exists

    @property
    def is_gone(self) -> bool:
        return self.status == 410

    @property
    def is_transient(self) -> bool:
        """Worth retrying unchanged: no response, throttled, or a server error."""
        return self.status == 0 or self.status == 429 or self.status >= 500

    @classmethod
    def from_status(cls, status: int, phrase: str, data: bytes) -> ApiError:
        body: dict[str, Any] | None = None
        if data:
            try:
                parsed = orjson.loads(data)
            except orjson.JSONDecodeError:
                parsed = None
            # Proxies and load balancers answer with HTML or plain text.
            text = {"message": data[:512].decode("utf-8", "replace")}
            body = parsed if isinstance(parsed, dict) else text
        reason = (body or {}).get("reason") or phrase or "Error"
        return cls(status, str(reason), body)

    @classmethod
    def from_status_object(cls, status: Mapping[str, Any]) -> ApiError:
        """Build from a `Status` delivered inside a watch ERROR event."""
        code = status.get("code")
        return cls(code if isinstance(code, int) else 0, str(status.get("reason") or "Error"),
                   dict(status))


def encode_query(query: Query) -> str:
    """URL query string; booleans as `true`/`false` like the API expects."""
    if not query:
        return ""
    pairs = [(k, ("true" if v else "false") if isinstance(v, bool) else str(v))
             for k, v in query.items() if v is not None]
    return urlencode(pairs)


class Getter(Protocol):
    def get(self, path: str) -> Any: ...


def get_or_none(rest: Getter, path: str) -> Any:
    """GET `path`, the API server's 404 answered as None. Any other failure still raises,
    so that a read that did not answer is never taken for "not there". A function over
    anything with `get`, so that each caller's narrow protocol (and its test fake) serves."""
    try:
        return rest.get(path)
    except ApiError as exc:
        if exc.is_not_found:
            return None
        raise


class Rest:
    """JSON over the API server. Thread-safe: the client's pool is."""

    def __init__(self, api_client: ApiClient, *, timeout: float = 30.0) -> None:
        self.api_client = api_client
        self.timeout = timeout

    # -- verbs -----------------------------------------------------------------

    def get(self, path: str, query: Query = None, *, timeout: Timeout = None) -> Any:
        return self.request("GET", path, query=query, timeout=timeout)

    def create(self, path: str, body: Mapping[str, Any], query: Query = None,
               *, timeout: Timeout = None) -> Any:
        return self.request("POST", path, body=body, query=query, timeout=timeout)

    def replace(self, path: str, body: Mapping[str, Any], *, timeout: Timeout = None) -> Any:
        """PUT; a `metadata.resourceVersion` in the body makes it conditional."""
        return self.request("PUT", path, body=body, timeout=timeout)

    def delete(self, path: str, body: Mapping[str, Any] | None = None, query: Query = None,
               *, timeout: Timeout = None) -> Any:
        return self.request("DELETE", path, body=body, query=query, timeout=timeout)

    def json_patch(self, path: str, ops: list[dict[str, Any]], query: Query = None,
                   *, timeout: Timeout = None) -> Any:
        return self.request("PATCH", path, body=ops, query=query, content_type=JSON_PATCH,
                            timeout=timeout)

    def merge_patch(self, path: str, patch: Mapping[str, Any], query: Query = None,
                    *, timeout: Timeout = None) -> Any:
        return self.request("PATCH", path, body=patch, query=query, content_type=MERGE_PATCH,
                            timeout=timeout)

    def apply(self, path: str, body: Mapping[str, Any], field_manager: str, force: bool = True,
              *, timeout: Timeout = None) -> Any:
        """Server-side apply. JSON is YAML, so the body needs no YAML encoder."""
        query = {"fieldManager": field_manager, "force": force}
        return self.request("PATCH", path, body=body, query=query, content_type=APPLY_PATCH,
                            timeout=timeout)

    def request(self, method: str, path: str, body: Any = None, query: Query = None,
                content_type: str | None = None, *, timeout: Timeout = None) -> Any:
        """One call; returns the parsed JSON body (None when empty).

        A non-JSON answer (`/healthz`, `/metrics`) comes back as text.
        """
        resp = self._send(method, path, body, query, content_type, timeout)
        try:
            data = resp.read()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(0, type(exc).__name__, {"message": str(exc)}) from exc
        finally:
            resp.release_conn()
        if not 200 <= resp.status < 300:
            raise ApiError.from_status(resp.status, resp.reason or "", data)
        if not data:
            return None
        if "json" not in (resp.headers.get("Content-Type") or "application/json"):
            return data.decode("utf-8", "replace")
        return orjson.loads(data)

    # -- streaming -------------------------------------------------------------

    def watch(self, path: str, query: Query = None, *, timeout_seconds: int = 60,
              connect_timeout: float = 10.0) -> WatchStream:
        """Open a watch; iterate the result for event dicts, close it to stop.

        The server ends the stream after `timeout_seconds`; the socket read
        timeout sits a little above that so a dead connection is noticed
        without cutting a healthy, idle one.
        """
        params: dict[str, QueryValue] = dict(query or {})
        params["watch"] = True
        params["timeoutSeconds"] = timeout_seconds
        resp = self._send("GET", path, None, params, None,
                          (connect_timeout, timeout_seconds + 15.0))
        if not 200 <= resp.status < 300:
            try:
                data = resp.read()
            finally:
                resp.release_conn()
            raise ApiError.from_status(resp.status, resp.reason or "", data)
        return WatchStream(resp)

    # -- plumbing --------------------------------------------------------------

    def _send(self, method: str, path: str, body: Any, query: Query,
              content_type: str | None, timeout: Timeout) -> urllib3.BaseHTTPResponse:
        headers = {"Accept": JSON}
        payload: Any = None
        if body is not None:
            headers["Content-Type"] = content_type or JSON
            payload = _payload(body, headers["Content-Type"])
        qs = encode_query(query)
        # param_serialize adds the default headers and refreshes tokens; the
        # query is appended by us so encoding stays under our control.
        _, url, headers, _, _ = self.api_client.param_serialize(
            method, path, header_params=headers, auth_settings=["BearerToken"])
        if qs:
            url = f"{url}?{qs}"
        try:
            resp = self.api_client.call_api(
                method, url, header_params=headers, body=payload,
                _request_timeout=self.timeout if timeout is None else timeout)
        except ApiException as exc:  # TLS failures surface this way
            raise ApiError(0, "TLSError", {"message": str(exc.reason)}) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(0, type(exc).__name__, {"message": str(exc)}) from exc
        return resp.response


def _payload(body: Any, content_type: str) -> Any:
    # The client's REST layer serialises Python values itself for JSON media
    # types (and would double-encode bytes); for other media types it only
    # passes str/bytes through, so those we encode.
    if content_type.split(";")[0].strip().endswith("json"):
        if isinstance(body, bytes | str):
            return orjson.loads(body)
        return body
    if isinstance(body, bytes | str):
        return body
    return orjson.dumps(body)


class WatchStream:
    """One open watch response, read as newline-delimited JSON events.

    Iterate in one thread; `close()` may be called from any thread and
    unblocks a pending read (the socket is shut down, not just dropped).
    """

    def __init__(self, response: urllib3.BaseHTTPResponse) -> None:
        self._response = response
        self._lock = threading.Lock()
        self._closed = False
        self._reading = False

    @property
    def closed(self) -> bool:
        return self._closed

    def __iter__(self) -> Iterator[dict[str, Any]]:
        with self._lock:
            if self._reading or self._closed:
                return
            self._reading = True
        buf = b""
        try:
            while not self._closed:
                try:
                    chunk = self._response.read1(65536)
                except Exception as exc:
                    # After close() the read fails in whatever way the HTTP
                    # stack happens to notice the dead socket.
                    if self._closed:
                        return
                    raise ApiError(0, type(exc).__name__, {"message": str(exc)}) from exc
                if not chunk:
                    break
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield orjson.loads(line)
            if buf.strip() and not self._closed:
                yield orjson.loads(buf)
        finally:
            with self._lock:
                self._closed = True
                self._reading = False
            self._dispose()

    def close(self) -> None:
        """Stop the stream; safe from any thread, and more than once."""
        with self._lock:
            if self._closed and not self._reading:
                return
            self._closed = True
            reading = self._reading
        # shutdown() wakes a reader blocked in recv(); that reader then tears
        # the response down itself, since the HTTP objects are not thread-safe.
        with contextlib.suppress(Exception):
            self._response.shutdown()
        if not reading:
            self._dispose()

    def _dispose(self) -> None:
        with contextlib.suppress(Exception):
            self._response.close()
        with contextlib.suppress(Exception):
            self._response.release_conn()

    def __enter__(self) -> WatchStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
