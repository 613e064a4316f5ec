"""raykueue's server as a process on loopback, for the tests and the benches.

`RaykueueServer` runs `raykueue serve` against a devstack stack (registering
its webhooks unless told not to); `LoopbackTLSServer` is what any such server
of ours has (a port, a CA); the replica helpers start several and find the
one that leads. The pytest fixtures over them are in testkit/stackfixtures.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import devstack
from devstack.procs import tail
from raykueue.core.contract import (
    GATE,
    NODE_TYPE_LABEL,
    QUEUE_LABEL,
    ROLE_WORKER,
    STANDALONE_ANNOTATION,
)
from testkit.waiting import wait_for

REPO_ROOT = Path(__file__).resolve().parent.parent


def metrics_page(url: str, ca_file: Path) -> str:
    """The /metrics page of the server at `url` (over TLS, trusting `ca_file`)."""
    import ssl
    import urllib.request

    context = ssl.create_default_context(cafile=str(ca_file))
    with urllib.request.urlopen(url + "/metrics", context=context, timeout=5) as resp:
        return resp.read().decode()


def metric_total(url: str, ca_file: Path, name: str) -> float:
    """The sum of every series of counter `name` on the /metrics page at `url` (over TLS)."""
    text = metrics_page(url, ca_file)
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith((name + "{", name + " ")))


def raykueue_command() -> list[str]:
    script = Path(sys.executable).parent / "raykueue"
    if script.exists():
        return [str(script)]
    found = shutil.which("raykueue")
    if found:
        return [found]
    return [sys.executable, "-m", "raykueue.app.cli"]


class ServerExited(AssertionError):
    """raykueue serve exited while we waited for it."""


class LoopbackTLSServer:
    """A server of ours on a loopback port, with its CA in `cert_dir`."""

    port: int
    cert_dir: Path

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        return self.cert_dir / "ca.crt"


class RaykueueServer(LoopbackTLSServer):
    """`raykueue serve` as a subprocess. `start()`, `stop()`, `restart()`, `logs()`."""

    def __init__(self, stack: devstack.Stack, workdir: Path, *, args: list[str] | None = None,
                 env: dict[str, str] | None = None, register: bool = True,
                 ready_timeout: float = 60.0):
        self.stack = stack
        self.cert_dir = workdir / "certs"
        self.log_path = workdir / "raykueue.log"
        self.extra_args = list(args or [])
        self.extra_env = dict(env or {})
        self.register = register
        self.ready_timeout = ready_timeout
        (self.port,) = devstack.free_ports(1)
        self.proc: subprocess.Popen | None = None
        self.registered = False

    @property
    def ca_pem(self) -> bytes:
        return self.ca_file.read_bytes()

    def command(self) -> list[str]:
        return [*raykueue_command(), "serve", "--host", "127.0.0.1", "--port", str(self.port),
                "--cert-dir", str(self.cert_dir), "--kubeconfig", str(self.stack.kubeconfig),
                *self.extra_args]

    def start(self, *, wait_ready: bool = True) -> RaykueueServer:
        """Start; unless `wait_ready` is False, wait for /readyz and register the webhooks."""
        if self.running:
            return self
        env = {**os.environ, "KUBECONFIG": str(self.stack.kubeconfig), **self.extra_env}
        log = open(self.log_path, "ab")  # noqa: SIM115 (the child keeps it)
        log.write(f"\n==== {' '.join(self.command())}\n".encode())
        log.flush()
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, cwd=REPO_ROOT,
                                     start_new_session=True)
        log.close()
        if not wait_ready:
            return self
        try:
            wait_for(self._ready, timeout=self.ready_timeout, interval=0.2,
                     message=lambda: f"raykueue /readyz on {self.url}; log:\n{self.logs()}",
                     fatal=(ServerExited,))
        except BaseException:
            self.stop()
            raise
        if self.register and not self.registered:
            devstack.register_webhooks(self.stack.kubeconfig, self.url, self.ca_pem)
            self.registered = True
            # The API server picks registrations up through a watch; until it
            # has, pods are created without us (KubeRay's included).
            wait_for(self._called_by_api_server, timeout=30, interval=0.1,
                     message=lambda: f"the API server to call {self.url}; log:\n{self.logs()}")
        return self

    def _called_by_api_server(self) -> bool:
        """A dry-run create of an opted-in Ray pod comes back gated by this server."""
        probe = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "webhook-probe-",
                         "labels": {NODE_TYPE_LABEL: ROLE_WORKER, QUEUE_LABEL: "probe"},
                         "annotations": {STANDALONE_ANNOTATION: "true"}},
            "spec": {"containers": [{"name": "probe", "image": "busybox"}]},
        }
        pod = self.stack.api.call("POST", "/api/v1/namespaces/default/pods?dryRun=All", probe)
        return any(g.get("name") == GATE for g in pod["spec"].get("schedulingGates") or [])

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise ServerExited(
                f"raykueue serve exited with {self.proc.returncode}:\n{self.logs()}")
        if not self.ca_file.exists():
            return False
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            with urllib.request.urlopen(f"{self.url}/readyz", context=ctx, timeout=2) as r:
                return r.status == 200
        except urllib.error.HTTPError:
            return False

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the process; the webhooks stay registered (so a test can see Fail)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        self.proc = None

    def restart(self, env: dict[str, str] | None = None) -> RaykueueServer:
        """With `env`, the server comes back with that as its whole extra environment."""
        self.stop()
        if env is not None:
            self.extra_env = dict(env)
        return self.start()

    def unregister(self) -> None:
        if self.registered:
            devstack.unregister_webhooks(self.stack.kubeconfig)
            self.registered = False

    def close(self) -> None:
        try:
            self.unregister()
        finally:
            self.stop()

    def metric_total(self, name: str) -> float:
        """The sum of every series of counter `name` on this server's /metrics."""
        return metric_total(self.url, self.ca_file, name)

    def logs(self, lines: int = 60) -> str:
        return tail(self.log_path, lines)


def controller_detail(server: RaykueueServer) -> str:
    """What the replica's /readyz says of its controller ("leading", "standing by ...")."""
    context = ssl.create_default_context(cafile=str(server.ca_file))
    with urllib.request.urlopen(server.url + "/readyz", context=context, timeout=5) as response:
        return json.loads(response.read())["checks"]["controller"]["detail"]


def start_replicas(stack: devstack.Stack, workdir: Path, env: dict[str, str],
                   count: int = 2) -> list[RaykueueServer]:
    """`count` unregistered `raykueue serve` processes campaigning for one Lease."""
    replicas = []
    for i in range(count):
        (workdir / str(i)).mkdir()
        replicas.append(RaykueueServer(stack, workdir / str(i), register=False, env=env).start())
    return replicas


def sole_leader(replicas: list[RaykueueServer], timeout: float = 60) -> RaykueueServer:
    """Wait until exactly one running replica reports leading; return it."""
    def leaders() -> list[RaykueueServer]:
        return [r for r in replicas if r.running and controller_detail(r).startswith("leading")]

    return wait_for(lambda: (found := leaders()) and len(found) == 1 and found[0],
                    timeout=timeout, message="exactly one leader")
