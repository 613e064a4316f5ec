"""Session fixtures over devstack: the real control plane, kubectl, a client, raykueue.

    api_stack        etcd + kube-apiserver + controller-manager + CRDs (started or reused)
    e2e_stack        the same stack upgraded with scheduler, kwok, Kueue and KubeRay
    node_stack       the e2e stack plus a real kubelet node (devstack/node/kubelet.py) whose
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
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import devstack
from devstack.kueue.shipped import SHIPPED
from testkit.servers import RaykueueServer
from testkit.waiting import wait_for

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
    """An e2e stack with Kueue as users install it (devstack/kueue/shipped.py)."""
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
        server.close()
        if keep_logs_if_failed(request, api_stack, server=server):
            print(f"\nraykueue server log ({server.log_path}):\n{server.logs()}", file=sys.stderr)


def keep_logs_if_failed(request: pytest.FixtureRequest, stack: devstack.Stack,
                        **servers: RaykueueServer) -> bool:
    """After a failed test, its raykueue logs go beside the stack's component logs
    (<stack dir>/logs, which outlive the session), named after the test; pytest's
    temporary directories do not last. True if the test failed."""
    report = getattr(request.node, "rep_call", None)
    if report is None or not report.failed:
        return False
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)[-150:]
    stack.log_dir.mkdir(parents=True, exist_ok=True)
    for role, server in servers.items():
        if server.log_path.exists():
            kept = stack.log_dir / f"raykueue-{slug}-{role}.log"
            shutil.copyfile(server.log_path, kept)
            print(f"\nraykueue {role} log kept in {kept}", file=sys.stderr)
    return True


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
