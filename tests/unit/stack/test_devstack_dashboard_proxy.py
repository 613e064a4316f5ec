"""The KubeRay operator's proxy to the local Ray heads' dashboards, on loopback fakes."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from devstack.ray.dashboard_proxy import Routes, routes_dir, serve, service_host

HOST = service_host("rc-head-svc", "ns")


class _Dashboard(BaseHTTPRequestHandler):
    """Says what it got; /missing answers 404 as the dashboard does for an unknown job."""

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        reply = f"{self.command} {self.path} {body.decode()}".encode()
        self.send_response(404 if self.path == "/missing" else 200)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@dataclass
class Servers:
    routes: Routes
    dashboard_port: int
    proxy_port: int
    opener: urllib.request.OpenerDirector  # sends http:// requests through the proxy


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    dashboard = ThreadingHTTPServer(("127.0.0.1", 0), _Dashboard)
    routes = Routes(routes_dir(tmp_path))
    proxy = serve(0, routes)
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (dashboard, proxy)]
    for t in threads:
        t.start()
    proxy_port = proxy.server_address[1]
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{proxy_port}"}))
    yield Servers(routes, dashboard.server_address[1], proxy_port, opener)
    for s in (dashboard, proxy):
        s.shutdown()
        s.server_close()


def _call(opener: urllib.request.OpenerDirector, url: str, data: bytes | None = None) -> tuple[int, str]:
    try:
        with opener.open(urllib.request.Request(url, data=data), timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_a_service_name_reaches_the_head_routed_to_it_and_only_while_routed(servers: Servers):
    routes, dashboard_port, opener = servers.routes, servers.dashboard_port, servers.opener
    url = f"http://{HOST}:8265/api/jobs/job-1?x=1"
    status, text = _call(opener, url)
    assert status == 502 and f"{HOST}:8265" in text  # no head stands in for it yet

    routes.add(HOST, 8265, dashboard_port)
    assert _call(opener, url) == (200, "GET /api/jobs/job-1?x=1 ")
    assert _call(opener, f"http://{HOST}:8265/api/jobs/", b'{"entrypoint": "x"}') == (
        200, 'POST /api/jobs/ {"entrypoint": "x"}')
    assert _call(opener, f"http://{HOST}:8265/missing")[0] == 404  # the head's answer, passed on
    assert _call(opener, f"http://{HOST}:6379/api/jobs/job-1")[0] == 502  # another port: no route

    routes.remove(HOST, 8265)
    assert _call(opener, url)[0] == 502


def test_the_proxy_answers_its_own_health_check_and_refuses_other_names(servers: Servers):
    with urllib.request.urlopen(f"http://127.0.0.1:{servers.proxy_port}/healthz", timeout=10) as resp:
        assert resp.read() == b"ok"
    with pytest.raises(ValueError):
        servers.routes.add("../escape", 8265, 1)
    assert servers.routes.lookup(service_host("unknown", "ns"), 8265) is None
    # Only routed names are forwarded, not even another loopback address.
    assert _call(servers.opener, f"http://127.0.0.1:{servers.dashboard_port}/")[0] == 502
