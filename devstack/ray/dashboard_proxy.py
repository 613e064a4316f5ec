"""The KubeRay operator's way to the local Ray heads' dashboards: an HTTP proxy on 127.0.0.1.

The operator, off-cluster here, talks to a RayCluster's dashboard at
`<head service>.<namespace>.svc.cluster.local:<port named "dashboard">`
(ray-operator v1.6 `utils.FetchHeadServiceURL`), through an `http.Client`
on Go's default transport, which sends plain-HTTP requests to $HTTP_PROXY
(loopback targets, as the API server, never go through it). No such name
resolves off-cluster, and in a cluster it would reach the head pod; here a
local Ray head stands in for that pod (devstack.ray.runner). So the stack
starts the operator with HTTP_PROXY pointing here, and this proxy forwards
each request for a Service name to the 127.0.0.1 port of the head standing
in for the Service's pod, as the Ray tier recorded it in the routes dir.
A name with no route gets 502, as an unreachable head would; nothing is
ever forwarded anywhere but 127.0.0.1.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

# The operator's default (its CLUSTER_DOMAIN env, which devstack leaves unset).
CLUSTER_DOMAIN = "cluster.local"
DASHBOARD_PORT_NAME = "dashboard"
UPSTREAM_TIMEOUT = 30.0
# Hop-by-hop headers (RFC 9110 7.6.1) are the proxy's own business, never forwarded;
# the length is set again for the body as read.
_NOT_FORWARDED = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
                  "trailer", "transfer-encoding", "upgrade", "proxy-connection", "content-length"}


def routes_dir(stack_dir: Path) -> Path:
    return stack_dir / "dashboard-routes"


def service_host(service: str, namespace: str) -> str:
    return f"{service}.{namespace}.svc.{CLUSTER_DOMAIN}"


class Routes:
    """One file per `host:port` in a directory, holding the local port it stands for.

    Files, so that the proxy (a stack process) and the Ray tier (the test
    process) share them without talking; each written whole (rename)."""

    def __init__(self, directory: Path):
        self.dir = directory

    def _file(self, host: str, port: int) -> Path:
        if "/" in host or host.startswith("."):
            raise ValueError(f"not a host name: {host!r}")
        return self.dir / f"{host}:{port}"

    def add(self, host: str, port: int, local_port: int) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self._file(host, port)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(str(local_port))
        os.replace(tmp, path)

    def remove(self, host: str, port: int) -> None:
        self._file(host, port).unlink(missing_ok=True)

    def lookup(self, host: str, port: int) -> int | None:
        try:
            return int(self._file(host, port).read_text())
        except (OSError, ValueError):
            return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as Go's transport expects of a proxy
    server: _Server

    def _reply(self, status: int, text: str) -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _forward(self) -> None:
        url = urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not url.scheme:  # origin-form: asked of the proxy itself
            self._reply(200, "ok") if url.path == "/healthz" else self._reply(404, "not a proxy request")
            return
        host, port = url.hostname or "", url.port or 80
        local = self.server.routes.lookup(host, port) if url.scheme == "http" else None
        if local is None:
            self._reply(502, f"no local Ray head stands in for {host}:{port}")
            return
        path = url.path or "/"
        if url.query:
            path += "?" + url.query
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _NOT_FORWARDED}
        conn = http.client.HTTPConnection("127.0.0.1", local, timeout=UPSTREAM_TIMEOUT)
        try:
            conn.request(self.command, path, body=body or None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except OSError as e:
            self._reply(502, f"{host}:{port} -> 127.0.0.1:{local}: {type(e).__name__}: {e}")
            return
        finally:
            conn.close()
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in _NOT_FORWARDED:
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _forward

    def do_CONNECT(self) -> None:
        self._reply(405, "no tunnels: only plain HTTP to local Ray heads")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, routes: Routes):
        super().__init__(("127.0.0.1", port), _Handler)
        self.routes = routes


def serve(port: int, routes: Routes) -> _Server:
    """A proxy listening on 127.0.0.1:`port` (0: any); `serve_forever()` it."""
    return _Server(port, routes)


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - the stack's process
    parser = argparse.ArgumentParser(prog="python -m devstack.ray.dashboard_proxy")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--routes", type=Path, required=True)
    args = parser.parse_args(argv)
    server = serve(args.port, Routes(args.routes))
    print(f"dashboard proxy on 127.0.0.1:{args.port}, routes in {args.routes}", file=sys.stderr, flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":  # pragma: no cover
    main()
