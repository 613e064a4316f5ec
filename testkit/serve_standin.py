"""Ray Serve's dashboard API for KubeRay's RayService controller, with no Ray process.

The e2e stack runs pods on kwok: nothing listens behind a head pod. KubeRay's
RayService controller still needs, for each of its RayClusters whose head pod is
Running and Ready, the head's dashboard (through devstack/ray/dashboard_proxy.py): it
PUTs the Serve config to `/api/serve/applications/` and switches traffic to a
cluster only once `GET /api/serve/applications/?api_type=declarative` lists every
application RUNNING (ray-operator v1.6 `reconcileServe`, `getAndCheckServeStatus`).

`ServeStandin` answers those two calls for the heads of one namespace, as a Ray
head does: no applications until a config was PUT, then each application of that
config RUNNING. It routes a head's Services to itself only while the head pod
runs (a head behind raykueue's gate, or gone, answers nothing: the proxy's 502),
and records every request by cluster, so a test can say which cluster KubeRay
deployed to and when.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from devstack.ray.dashboard_proxy import DASHBOARD_PORT_NAME, Routes, service_host
from raykueue.core import contract as c
from raykueue.kube.resources import PODS, Resource
from raykueue.kube.rest import ApiError, Rest
from testkit.pods import running

SERVICES = Resource("", "v1", "services")
SERVE_PATH = "/api/serve/applications/"
POLL_SECONDS = 0.3


@dataclass(frozen=True)
class Call:
    cluster: str
    method: str
    at: float


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _answer(self, status: int, body: dict[str, Any] | None = None) -> None:
        data = json.dumps(body or {}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _cluster(self) -> str | None:
        return self.server.standin.cluster_for_host(self.headers.get("Host") or "")

    def do_GET(self) -> None:
        cluster = self._cluster()
        if cluster is None or not self.path.startswith(SERVE_PATH):
            self._answer(404)
            return
        self.server.standin.record(cluster, "GET")
        self._answer(200, self.server.standin.details(cluster))

    def do_PUT(self) -> None:
        cluster = self._cluster()
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if cluster is None or not self.path.startswith(SERVE_PATH):
            self._answer(404)
            return
        self.server.standin.deploy(cluster, json.loads(body or b"{}"))
        self._answer(200)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, standin: ServeStandin):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.standin = standin


class ServeStandin:
    """Serve's dashboard API for the running heads of namespace `ns` (a context manager)."""

    def __init__(self, api: Rest, ns: str, routes: Routes):
        self.api, self.ns, self.routes = api, ns, routes
        self.calls: list[Call] = []
        self._apps: dict[str, list[str]] = {}  # cluster -> application names deployed there
        self._hosts: dict[tuple[str, int], str] = {}  # routed (Service host, port) -> cluster
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = _Server(self)
        self._threads = [threading.Thread(target=self._server.serve_forever, daemon=True),
                         threading.Thread(target=self._follow, daemon=True)]

    def __enter__(self) -> ServeStandin:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._server.shutdown()
        for t in self._threads:
            t.join(timeout=10)
        self._server.server_close()
        with self._lock:
            for host, port in self._hosts:
                self.routes.remove(host, port)
            self._hosts.clear()

    # --- what the handler asks ------------------------------------------------------------

    def cluster_for_host(self, host_header: str) -> str | None:
        host, _, port = host_header.partition(":")
        with self._lock:
            return self._hosts.get((host, int(port or 80)))

    def record(self, cluster: str, method: str) -> None:
        with self._lock:
            self.calls.append(Call(cluster, method, time.monotonic()))

    def deploy(self, cluster: str, config: dict[str, Any]) -> None:
        names = [str(app.get("name") or "default") for app in config.get("applications") or []]
        with self._lock:
            self.calls.append(Call(cluster, "PUT", time.monotonic()))
            self._apps[cluster] = names

    def details(self, cluster: str) -> dict[str, Any]:
        with self._lock:
            names = list(self._apps.get(cluster, []))
        return {"deploy_mode": "MULTI_APP", "applications": {
            name: {"name": name, "status": "RUNNING", "message": "", "route_prefix": "/",
                   "deployments": {"d": {"name": "d", "status": "HEALTHY", "message": ""}}}
            for name in names}}

    def deployed_to(self) -> list[str]:
        """The clusters KubeRay PUT a Serve config to, in order."""
        with self._lock:
            return [call.cluster for call in self.calls if call.method == "PUT"]

    # --- following the heads -----------------------------------------------------------------

    def _follow(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            try:
                self._route()
            except ApiError:
                continue  # the next poll reads again

    def _route(self) -> None:
        """Every Service selecting a running head pod, at its dashboard port: here; nothing else."""
        heads = [pod for pod in self.api.get(PODS.path(self.ns), {
            "labelSelector": f"{c.NODE_TYPE_LABEL}=head"})["items"] if running(pod)]
        want: dict[tuple[str, int], str] = {}
        for svc in self.api.get(SERVICES.path(self.ns))["items"]:
            selector = svc["spec"].get("selector") or {}
            for pod in heads:
                labels = pod["metadata"].get("labels") or {}
                if not selector or any(labels.get(k) != v for k, v in selector.items()):
                    continue
                for port in svc["spec"].get("ports") or []:
                    if port.get("name") == DASHBOARD_PORT_NAME:
                        want[(service_host(svc["metadata"]["name"], self.ns), port["port"])] = (
                            labels.get(c.CLUSTER_LABEL, ""))
        local = self._server.server_address[1]
        with self._lock:
            for key in set(self._hosts) - set(want):
                self.routes.remove(*key)
            for key, cluster in want.items():
                if self._hosts.get(key) != cluster:
                    self.routes.add(*key, local)
            self._hosts = want
