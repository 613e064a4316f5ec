"""README's install commands, taken from README.md and run as written on the real API server.

Before: the Helm line, run as written on a fresh API server, failed three ways
(`no matches for kind "PrometheusRule"`; no `--create-namespace`, while with it the
chart's own Namespace collided; `priorities.create=true` refused by an existing
`ray-head` WorkloadPriorityClass), and the tests ran other commands than the README's.
Here the commands are read from README's ```sh blocks, not retyped, and run by bash
with kubectl, helm and kustomize on PATH, in a copy of the repo's install files (the
README's `kustomize edit` writes into manifests/). The lines that need an image
registry or a kubelet are left out by name, and the test fails if they change.

The api stack registers webhook configurations of the same names for other tests;
this module takes them out of the way and puts back what it found (as test_install.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import devstack
from devstack.controlplane.kubeapi import KubeError
from testkit.api.install import CONFIGS, NAMESPACE, WPCS, config_path, ours_left, wait_namespace_gone
from testkit.kustomizes import oldest_kustomize
from testkit.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
IMAGE = "registry.example.com/raykueue:0.1.0"
DEPLOYMENT = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/raykueue"
PRIORITIES = ("ray-head", "ray-worker")
# README lines this tier cannot run, each with what it needs (tests/node runs an
# install on a real kubelet from the image built by scripts/build-image).
NEEDS_MORE = {
    "docker ": "a container engine and a registry",
    "rollout status": "a kubelet to run the pods",
    "kubectl apply -k examples/": "raykueue's pods running, to admit the opted-in RayCluster",
}


def commands(heading: str, doc: Path = README) -> list[str]:
    """The first ```sh block after the heading that starts with `heading`: one command a
    line, continuations joined, comment lines dropped."""
    text = doc.read_text()
    found = re.search(rf"\n{re.escape(heading)}[^\n]*\n", text)
    assert found, f"no heading {heading} in {doc}"
    block = re.search(r"```sh\n(.*?)```", text[found.end():], re.S)
    assert block, f"no ```sh block under {heading} in {doc}"
    joined = block.group(1).replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def runnable(lines: list[str]) -> list[str]:
    return [line for line in lines if not any(key in line for key in NEEDS_MORE)]


@pytest.fixture(scope="module")
def fresh(api_stack: devstack.Stack, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[devstack.Stack]:
    """No raykueue webhook configuration, namespace or priority class: a fresh cluster's
    state for what the README installs; what was there is put back after."""
    api = api_stack.api
    saved: list[tuple[str, dict[str, Any]]] = []
    for plural, name in CONFIGS:
        found = api.get_or_none(config_path(plural, name))
        if found is not None:
            saved.append((plural, _bare(found)))
            api.delete(config_path(plural, name))
    classes = {n: api.get_or_none(f"{WPCS}/{n}") for n in PRIORITIES}
    for name, found in classes.items():
        if found is not None:
            api.delete(f"{WPCS}/{name}")
    wait_namespace_gone(api, NAMESPACE)
    try:
        yield api_stack
    finally:
        for name, found in classes.items():
            with contextlib.suppress(KubeError):
                api.delete(f"{WPCS}/{name}")
            if found is not None:
                api.call("POST", WPCS, _bare(found))
        for plural, obj in saved:
            with contextlib.suppress(KubeError):
                api.delete(config_path(plural, obj["metadata"]["name"]))
            api.call("POST", config_path(plural), obj)


def _bare(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    obj = {k: v for k, v in obj.items() if k != "status"}
    obj["metadata"] = {k: meta[k] for k in ("name", "labels", "annotations") if k in meta}
    return obj


@pytest.fixture
def shell(fresh: devstack.Stack, tmp_path: Path):
    """bash in a copy of the install files, the stack's kubectl and helm and the oldest
    kustomize README claims on PATH, KUBECONFIG the stack's."""
    work = tmp_path / "repo"
    for part in ("manifests", "examples", "charts"):
        shutil.copytree(ROOT / part, work / part, symlinks=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, target in (("kubectl", fresh.binary("kubectl")), ("helm", fresh.binary("helm")),
                         ("kustomize", oldest_kustomize())):
        (bin_dir / name).symlink_to(target)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "KUBECONFIG": str(fresh.kubeconfig), "HOME": str(tmp_path)}

    def run(line: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", line], cwd=work, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{line}\nexited {done.returncode}:\n{done.stderr}{done.stdout}"
        return done
    return run


DOCS = [README, ROOT / "manifests" / "README.md"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_the_left_out_lines_are_the_ones_named(doc: Path) -> None:
    lines = commands("## Install", doc)
    left = [line for line in lines if line not in runnable(lines)]
    # README's docker line builds and pushes; manifests/README.md's are two lines.
    assert {key for key in NEEDS_MORE if any(key in line for line in left)} <= set(NEEDS_MORE)
    assert any("docker build" in line for line in left), left
    assert any("kubectl apply -k manifests/" in line for line in runnable(lines))
    assert any("kustomize edit set image" in line for line in runnable(lines))


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_kustomize_install_runs_as_written(fresh: devstack.Stack, shell, doc: Path) -> None:
    api = fresh.api
    lines = runnable(commands("## Install", doc))
    for line in lines:
        shell(line)
    deployment = api.get(DEPLOYMENT)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == IMAGE  # the doc's `kustomize edit set image`, with kustomize v5.5.0
    assert sorted(ours_left(api)) == sorted(name for _, name in CONFIGS)
    if any("components/priorities" in line for line in lines):
        assert all(api.get_or_none(f"{WPCS}/{n}") for n in PRIORITIES)

    # The doc's uninstall, its kubectl lines (`raykueue uninstall` has tests/api/test_uninstall*).
    # Not `kubectl delete -k examples/` ("if you applied them"; this test did not): the
    # stack's own sample ResourceFlavor and ClusterQueue have the examples' names.
    for line in commands("## Uninstall", doc):
        if line.startswith("kubectl ") and "examples/" not in line:
            shell(line)
    assert ours_left(api) == []
    assert not any(api.get_or_none(f"{WPCS}/{n}") for n in PRIORITIES)
    wait_namespace_gone(api, NAMESPACE)


def test_readme_helm_install_runs_as_written(fresh: devstack.Stack, shell) -> None:
    api = fresh.api
    # A ray-head class the release does not own (kustomize's, or the user's): used as
    # it is; before, `priorities.create=true` failed on it.
    api.call("POST", WPCS, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                            "metadata": {"name": "ray-head"}, "value": 4242})
    lines = commands("## Helm")
    assert any(line.startswith("helm install ") for line in lines)
    try:
        for line in lines:
            shell(line)
        status = shell(f"helm status raykueue -n {NAMESPACE}").stdout
        assert "STATUS: deployed" in status
        (container,) = api.get(DEPLOYMENT)["spec"]["template"]["spec"]["containers"]
        assert container["image"] == IMAGE
        head, worker = (api.get(f"{WPCS}/{n}") for n in PRIORITIES)
        assert head["value"] == 4242
        assert "meta.helm.sh/release-name" not in (head["metadata"].get("annotations") or {})
        assert worker["metadata"]["annotations"]["meta.helm.sh/release-name"] == "raykueue"
        labels = api.get(f"/api/v1/namespaces/{NAMESPACE}")["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
        # An upgrade with the same flags keeps the release's own class and leaves the other.
        install = next(line for line in lines if line.startswith("helm install "))
        shell(install.replace("helm install ", "helm upgrade ", 1))
        assert api.get_or_none(f"{WPCS}/ray-worker") is not None
        assert api.get(f"{WPCS}/ray-head")["value"] == 4242
    finally:
        # The test's own clean-up, not a README line: the chart's pre-delete hook is a
        # Job, and the api tier runs no Job controller (tests/node/test_uninstall_helm.py
        # runs the hook on a real kubelet), so it is skipped here.
        shell(f"helm uninstall raykueue -n {NAMESPACE} --wait --ignore-not-found --no-hooks")
        with contextlib.suppress(KubeError):
            api.delete(f"/api/v1/namespaces/{NAMESPACE}")
    assert ours_left(api) == []
    assert api.get_or_none(f"{WPCS}/ray-worker") is None
    assert api.get(f"{WPCS}/ray-head")["value"] == 4242
    wait_namespace_gone(api, NAMESPACE)


def test_monitoring_without_the_operators_crds_fails_saying_so(fresh: devstack.Stack, shell) -> None:
    """README's line plus `--set monitoring.enabled=true` where the Prometheus Operator is
    not installed: one error that says what to do, and nothing left behind."""
    api = fresh.api
    # tests/api/test_chart_api.py installs the CRDs and deletes them without waiting.
    wait_for(lambda: api.get_or_none("/apis/monitoring.coreos.com/v1") is None, timeout=60,
             message="the Prometheus Operator's CRDs gone from discovery")
    install = next(line for line in commands("## Helm") if line.startswith("helm install "))
    try:
        with pytest.raises(AssertionError) as failed:
            shell(install + " --set monitoring.enabled=true")
        text = str(failed.value)
        assert "monitoring.enabled=true needs the Prometheus Operator's CRDs" in text
        assert "no matches for kind" not in text
        assert ours_left(api) == []
    finally:
        shell(f"helm uninstall raykueue -n {NAMESPACE} --ignore-not-found --no-hooks")
        with contextlib.suppress(KubeError):
            api.delete(f"/api/v1/namespaces/{NAMESPACE}")
    wait_namespace_gone(api, NAMESPACE)
