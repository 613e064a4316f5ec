"""Root conftest: tier markers by folder, stack options, stack fixtures.

tests/unit -> `unit`, tests/api -> `api`, tests/e2e -> `e2e`, tests/ray -> `ray`. Select with -m,
e.g. `python -m pytest -m unit`. The api and e2e tiers start (or reuse) the
local control plane from devstack; build it first with controlplane/build.sh.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .stackfixtures import (  # noqa: F401 (fixtures)
    RaykueueServer,
    api_stack,
    e2e_stack,
    k8s,
    kubeconfig,
    kubectl,
    new_namespace,
    raykueue_server,
    stack_owner,
    stack_summary,
)

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "api", "e2e", "ray")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("raykueue")
    group.addoption("--keep-stack", action="store_true", default=False,
                    help="leave a stack this session started running at its end")
    group.addoption("--stack-dir", default=None,
                    help="stack directory (default $RAYKUEUE_STACK_DIR or ~/.cache/raykueue/stack)")


def pytest_configure(config: pytest.Config) -> None:
    for tier in TIERS:
        config.addinivalue_line("markers", f"{tier}: tests under tests/{tier}")
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
