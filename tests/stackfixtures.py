"""Session fixtures over devstack: the real control plane, kubectl, a client, raykueue.

    api_stack        etcd + kube-apiserver + controller-manager + CRDs (started or reused)
    e2e_stack        the same stack upgraded with scheduler, kwok, Kueue and KubeRay
    node_stack       the e2e stack plus a real kubelet node (devstack/node.py) whose
                     containerd holds raykueue's image (scripts/build-image)
    shipped_stack    an e2e stack running Kueue as shipped: the session's own stack when
                     it runs that mode (--kueue=shipped, RAYKUEUE_KUEUE), else a second
                     stack in <stack dir>-shipped
    kubectl          kubectl("get", "pods", "-A") -> CompletedProcess (never raises)
    k8s              kubernetes.client.ApiClient for the admin kubeconfig
    raykueue_server  `raykueue serve` on a free port, webhooks registered, stopped after

A stack that a test session started is stopped when the last session using it
ends (unless --keep-stack); one started by `scripts/cluster up` is left alone.
Logs stay in <stack dir>/logs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import devstack
from devstack.kueue_shipped import SHIPPED
from devstack.procs import tail
from webhooks.contract import (
    GATE,
    NODE_TYPE_LABEL,
    QUEUE_LABEL,
    ROLE_WORKER,
    STANDALONE_ANNOTATION,
)

from .waiting import wait_for

REPO_ROOT = Path(__file__).resolve().parent.parent


class StackOwner:
    """Brings the stack up to the tier asked for, at most once per tier."""

    def __init__(self, config: devstack.StackConfig, keep: bool):
        self.config = config
        self.keep = keep
        self.stack: devstack.Stack | None = None
        self.started = False
        self.failed: str | None = None
        self.tiers: set[str] = set()
        self.stopped = False

    def ensure(self, tier: str) -> devstack.Stack:
        if self.failed:
            pytest.fail(f"the {tier} stack is unavailable (an earlier start failed):\n{self.failed}",
                        pytrace=False)
        if tier in self.tiers and self.stack is not None:
            return self.stack
        t0 = time.monotonic()
        try:
            stack, started = devstack.up(tier, self.config, user_pid=os.getpid())
        except devstack.StackError as e:
            self.failed = str(e)
            pytest.fail(f"could not start the {tier} stack (logs in "
                        f"{self.config.stack_dir / 'logs'}):\n{e}", pytrace=False)
        self.started = self.started or started
        self.stack = stack
        self.tiers.add(tier)
        # A tier includes the ones before it (devstack.config.TIERS).
        self.tiers.update(devstack.TIERS[:devstack.TIERS.index(tier)])
        print(f"\n[devstack] {tier} stack {'started' if started else 'reused'} in "
              f"{time.monotonic() - t0:.1f}s at {stack.dir}", file=sys.stderr)
        return stack

    def finish(self) -> None:
        """Stop the stack if a session started it and no other live session uses it."""
        # A failed start may have left processes that this session owns.
        if (self.stack is not None or self.failed) and not self.keep:
            self.stopped = devstack.release(self.config, os.getpid(), keep_logs=True)


@pytest.fixture(scope="session")
def stack_owner(request: pytest.FixtureRequest) -> Iterator[StackOwner]:
    config = devstack.StackConfig()
    opt = request.config.getoption
    if opt("--stack-dir"):
        config.stack_dir = Path(opt("--stack-dir"))
    if opt("--kueue"):
        config.kueue_mode = opt("--kueue")
    owner = StackOwner(config, keep=opt("--keep-stack"))
    request.config.stash[_OWNER_KEY] = owner
    yield owner
    owner.finish()


_OWNER_KEY = pytest.StashKey[StackOwner]()


def stack_summary(config: pytest.Config) -> str | None:
    """For the terminal summary: where the logs are, if a stack was used."""
    owner = config.stash.get(_OWNER_KEY, None)
    if owner is None or (owner.stack is None and not owner.failed):
        return None
    state = "stopped" if owner.stopped else "left running"
    return (f"devstack: stack {state}; component logs in {owner.config.stack_dir / 'logs'}"
            f" (kubeconfig {owner.config.stack_dir / 'kubeconfig'})")


@pytest.fixture(scope="session")
def api_stack(stack_owner: StackOwner) -> devstack.Stack:
    return stack_owner.ensure("api")


@pytest.fixture(scope="session")
def e2e_stack(stack_owner: StackOwner) -> devstack.Stack:
    return stack_owner.ensure("e2e")


@pytest.fixture(scope="session")
def node_stack(stack_owner: StackOwner) -> devstack.Stack:
    return stack_owner.ensure("node")


@pytest.fixture(scope="session")
def shipped_stack(request: pytest.FixtureRequest,
                  stack_owner: StackOwner) -> Iterator[devstack.Stack]:
    """An e2e stack with Kueue as users install it (devstack/kueue_shipped.py)."""
    if stack_owner.config.kueue_mode == SHIPPED:
        yield stack_owner.ensure("e2e")
        return
    config = dataclasses.replace(stack_owner.config, kueue_mode=SHIPPED,
                                 stack_dir=Path(f"{stack_owner.config.stack_dir}-shipped"))
    owner = StackOwner(config, keep=stack_owner.keep)
    try:
        yield owner.ensure("e2e")
    finally:
        owner.finish()


@pytest.fixture(scope="session")
def kubeconfig(api_stack: devstack.Stack) -> Path:
    return api_stack.kubeconfig


Kubectl = Callable[..., subprocess.CompletedProcess]


@pytest.fixture(scope="session")
def kubectl(api_stack: devstack.Stack) -> Kubectl:
    """kubectl(*args, input=None, check=False, timeout=120) -> CompletedProcess (text)."""

    def run(*args: str, input: str | None = None, check: bool = False,
            timeout: float = 120) -> subprocess.CompletedProcess:
        result = api_stack.kubectl(*args, input=input, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stderr}{result.stdout}")
        return result

    return run


@pytest.fixture(scope="session")
def k8s(api_stack: devstack.Stack):
    """A kubernetes.client.ApiClient for the admin kubeconfig."""
    from kubernetes import config as kconfig

    client = kconfig.new_client_from_config(config_file=str(api_stack.kubeconfig))
    yield client
    client.close()


# ---- raykueue serve ------------------------------------------------------------------

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


def _raykueue_command() -> list[str]:
    script = Path(sys.executable).parent / "raykueue"
    if script.exists():
        return [str(script)]
    found = shutil.which("raykueue")
    if found:
        return [found]
    return [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main(sys.argv[1:]))"]


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
        return [*_raykueue_command(), "serve", "--host", "127.0.0.1", "--port", str(self.port),
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


@pytest.fixture
def raykueue_server(request: pytest.FixtureRequest, api_stack: devstack.Stack,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[RaykueueServer]:
    """A started raykueue server with its webhooks registered.

    Configure with `@pytest.mark.raykueue_server(args=[...], env={...}, register=True)`
    or indirect parametrization with the same keys. The test may call
    `.stop()`, `.start()` and `.restart()`; teardown unregisters the webhooks and stops it.
    """
    options: dict = {}
    marker = request.node.get_closest_marker("raykueue_server")
    if marker is not None:
        options.update(marker.kwargs)
    if getattr(request, "param", None):
        options.update(request.param)
    workdir = Path(tempfile.mkdtemp(prefix="raykueue-server-",
                                    dir=tmp_path_factory.getbasetemp()))
    server = RaykueueServer(api_stack, workdir, **options)
    try:
        server.start()
        yield server
    finally:
        failed = getattr(request.node, "rep_call", None)
        server.close()
        if failed is not None and failed.failed:
            print(f"\nraykueue server log ({server.log_path}):\n{server.logs()}", file=sys.stderr)


# ---- namespaces ----------------------------------------------------------------------

@pytest.fixture
def new_namespace(api_stack: devstack.Stack) -> Iterator[Callable[..., str]]:
    """new_namespace(prefix="t", labels=None) -> name: a fresh namespace, deleted after.

    Returns once the namespace's default ServiceAccount exists, so pods can be
    created in it at once.
    """
    yield from namespaces(api_stack)


def namespaces(stack: devstack.Stack) -> Iterator[Callable[..., str]]:
    """The body of `new_namespace`, for any stack (a fixture generator's `yield from`)."""
    import uuid

    api = stack.api
    made: list[str] = []

    def make(prefix: str = "t", labels: dict[str, str] | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        api.call("POST", "/api/v1/namespaces", {
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels or {}}})
        made.append(name)
        wait_for(lambda: api.get_or_none(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
                 timeout=30, message=f"ServiceAccount {name}/default")
        return name

    yield make
    for name in made:
        api.delete(f"/api/v1/namespaces/{name}")


# --- several replicas ---------------------------------------------------------------------


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
