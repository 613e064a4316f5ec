"""Root conftest: tier markers by folder, stack options, stack fixtures.

Tiers are named for what they need: tests/unit -> `unit` (Python only: no server process,
no Go, no Go module cache, no kubectl, no network), tests/serve -> `serve` (starts
`raykueue serve` processes), tests/tools -> `tools` (what controlplane/build.sh makes:
promtool, helm, kubectl's kustomize, the Kueue module in the Go module cache), tests/api -> `api`
(a real kube-apiserver and etcd), tests/e2e -> `e2e` (the whole stack), tests/ray -> `ray`
(the e2e stack plus real Ray processes and the KubeRay autoscaler), tests/node -> `node`
(the e2e stack plus a real kubelet node running raykueue's image; builds the node's
binaries and the image first, see docs/DEVSTACK.md). Select
with -m, e.g. `python -m pytest -m unit`. The api and e2e tiers start (or reuse)
the local control plane from devstack; with --build-controlplane (scripts/test
passes it) controlplane/build.sh runs first, and only when a selected test needs
the stack or the tools it builds, so `-m unit` never needs Go.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.config import KUEUE_MODES
from testkit.stackfixtures import (  # noqa: F401 (fixtures)
    api_stack,
    e2e_stack,
    k8s,
    kubeconfig,
    kubectl,
    new_namespace,
    node_stack,
    raykueue_server,
    shipped_stack,
    stack_owner,
    stack_summary,
)

TESTS = Path(__file__).resolve().parent
# The one declaration of the tiers: each test is marked with its folder's tier (tests/<tier>/...),
# so no module says it again. The order is pyproject's testpaths order: fast feedback first.
TIERS = {
    "unit": "Python only: starts no server process, needs no Go, Go module cache, kubectl or network "
            "(in-process loopback fakes at most)",
    "serve": "starts `raykueue serve` as a process (no Kubernetes)",
    "tools": "what controlplane/build.sh makes (promtool, helm, kubectl's kustomize, the Kueue module), "
             "no servers",
    "api": "needs a real kube-apiserver and etcd",
    "e2e": "needs the whole stack (Kueue, KubeRay, scheduler, kwok)",
    "ray": "the e2e stack plus real Ray (head, workers, the KubeRay autoscaler) as local processes",
    "node": "the e2e stack plus a real kubelet node running raykueue's own image, installed as users "
            "install it",
}
REPO_ROOT = TESTS.parent


@pytest.fixture(scope="session", autouse=True)
def sealed_from_in_cluster() -> Iterator[None]:
    """No test, nor a server it starts, may find the cluster this run happens to be in.

    Inside a pod (CI on Kubernetes) these variables point at the real cluster;
    tests that want in-cluster behaviour set them on purpose.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        patch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
        yield


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("raykueue")
    group.addoption("--keep-stack", action="store_true", default=False,
                    help="leave a stack this session started running at its end")
    group.addoption("--stack-dir", default=None,
                    help="stack directory (default $RAYKUEUE_STACK_DIR or ~/.cache/raykueue/stack)")
    group.addoption("--kueue", choices=KUEUE_MODES, default=None,
                    help="which Kueue the stack runs (default $RAYKUEUE_KUEUE or shipped); "
                         "see devstack/kueue/shipped.py")
    group.addoption("--build-controlplane", action="store_true", default=False,
                    help="run controlplane/build.sh first when a selected test needs the stack")


def pytest_configure(config: pytest.Config) -> None:
    for tier, needs in TIERS.items():
        config.addinivalue_line("markers", f"{tier}: tests/{tier}/: {needs}")
    config.addinivalue_line(
        "markers",
        "raykueue_server(args=None, env=None, register=True): options for the raykueue_server fixture",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        try:
            rel = Path(str(item.path)).resolve().relative_to(TESTS)
        except ValueError:
            continue
        if rel.parts and rel.parts[0] in TIERS:
            item.add_marker(getattr(pytest.mark, rel.parts[0]))


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    if not config.getoption("--build-controlplane") or config.getoption("collectonly"):
        return
    # "stack_owner" is behind every stack fixture (api_stack, e2e_stack, kubectl, ...);
    # the tools tier runs what the build makes (promtool, helm, kubectl, the Kueue module).
    if not any("stack_owner" in getattr(item, "fixturenames", ()) or item.get_closest_marker("tools")
               for item in session.items):
        return
    builds = [["bash", str(REPO_ROOT / "controlplane" / "build.sh")]]
    # The node tier's binaries and raykueue's image, only when a node test is selected.
    if any("node_stack" in getattr(item, "fixturenames", ()) for item in session.items):
        builds += [["bash", str(REPO_ROOT / "controlplane" / "node" / "build.sh")],
                   [str(REPO_ROOT / "scripts" / "build-image")]]
    capture = config.pluginmanager.getplugin("capturemanager")
    for argv in builds:
        with capture.global_and_fixture_disabled():  # a cold build takes minutes: show it
            code = subprocess.run(argv, stdout=subprocess.DEVNULL if argv[0].endswith("build-image")
                                  else None).returncode
        if code != 0:
            pytest.exit(f"{' '.join(argv)} exited {code}; the selected tests need it (select "
                        f"`-m unit` or `-m serve` to run without the stack, `-m 'not node'` "
                        f"without the real node)", returncode=code)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    # lets fixtures see how the test went (e.g. print server logs on failure)
    setattr(item, "rep_" + report.when, report)
    return report


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    text = stack_summary(config)
    if text and exitstatus != 0:
        terminalreporter.write_line(text)
