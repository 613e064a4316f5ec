"""The tools tier: what controlplane/build.sh provides, run on our files.

promtool, helm and kubectl's kustomize (RAYKUEUE_BIN_DIR), and the Kueue
module in the Go module cache. No servers. A missing one fails the tier
rather than skipping it, so CI cannot pass without having run them.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from devstack.config import default_bin_dir
from devstack.kueue.shipped import KueueModule, shipped_module

Tool = Callable[..., subprocess.CompletedProcess[str]]


def _tool(name: str) -> Tool:
    path = default_bin_dir() / name
    if not path.exists():
        pytest.fail(f"{path} is missing; run controlplane/build.sh")

    def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(path), *map(str, args)], capture_output=True, text=True,
                              timeout=120, cwd=cwd)
    return run


@pytest.fixture(scope="session")
def promtool() -> Tool:
    return _tool("promtool")


@pytest.fixture(scope="session")
def helm() -> Tool:
    return _tool("helm")


@pytest.fixture(scope="session")
def kubectl() -> Tool:
    """The control plane's kubectl, for `kubectl kustomize`."""
    return _tool("kubectl")


@pytest.fixture(scope="session")
def kueue_module() -> KueueModule:
    """The Kueue module controlplane/go.mod pins, from the Go module cache."""
    try:
        return shipped_module()
    except FileNotFoundError as exc:
        pytest.fail(f"{exc}")
