"""The Ray tier: the e2e stack plus real Ray for its pods and the real autoscaler.

The e2e fixtures (admin client, raykueue's webhooks and controller, a fresh
queue per test) come from tests/e2e; this adds `ray_tier` (every Ray process of
a test, stopped and checked for leftovers after it), `ray_runner` (Ray for
the pods of a RayCluster, by name) and `ray_cluster` (an opted-in, autoscaled
RayCluster with Ray running for its pods).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import devstack
from devstack import dashboard_proxy, pki, ray_driver
from devstack.ray_procs import RayProcess, RayProcessError
from devstack.ray_runner import RayClusterRunner, RayTier
from raykueue.core import contract as c
from testkit.waiting import wait_for
from tests.e2e.test_controller_e2e import (  # noqa: F401 - fixtures
    RAYCLUSTERS,
    admin,
    controller,
    queue,
    webhooks,
)

FIGURES: dict[str, Any] = {}
# A head starts in seconds on an idle machine; on a busy one a start can take a
# minute and be tried again (devstack.ray_runner.START_ATTEMPTS).
HEAD_TIMEOUT = 300


def pytest_terminal_summary(terminalreporter) -> None:
    if FIGURES:
        terminalreporter.write_line("ray tier figures: " + json.dumps(FIGURES, sort_keys=True))


@pytest.fixture
def ray_tier(request: pytest.FixtureRequest, e2e_stack: devstack.Stack) -> Iterator[RayTier]:
    tier = RayTier(e2e_stack.log_dir / "ray" / request.node.name)
    # The operator calls the heads' dashboards through the proxy: both must stay on loopback too.
    tier.watch_sessions([e2e_stack.procs[name].pid for name in ("dashboard-proxy", "ray-operator")])
    yield tier
    report = getattr(request.node, "rep_call", None)
    failed = report is None or report.failed
    left = tier.close(keep_files=failed)
    FIGURES.setdefault("peak_pss_mib", {})[request.node.name] = round(tier.watched.peak_pss / 2**20)
    FIGURES.setdefault("retried_node_starts", {})[request.node.name] = len(tier.watched.retried_starts)
    if failed:
        print(f"\nRay tier logs in {tier.log_dir}, Ray's own under {tier.root}", file=sys.stderr)
    if left:
        pytest.fail("Ray processes outlived the test:\n" + "\n".join(left), pytrace=False)


def opted_in(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A Ray object opted in to raykueue as the README says, on the test queue's LocalQueue."""
    return {"apiVersion": "ray.io/v1", "kind": kind,
            "metadata": {"name": name, "labels": {c.QUEUE_LABEL: "team-a"},
                         "annotations": {c.STANDALONE_ANNOTATION: "true"}},
            "spec": spec}


def raycluster(name: str, *, idle_seconds: int = 60, autoscaler_env: dict[str, str] | None = None,
               max_workers: int = 10, min_workers: int = 0) -> dict[str, Any]:
    """An opted-in RayCluster, autoscaler v2 on, `min_workers` workers until Ray asks for more.

    Quota per pod: the head 1 CPU (its container 750m and the autoscaler
    sidecar's 250m, which KubeRay adds to the head pod), a worker 1 CPU.
    """
    def container(role: str, cpu: str) -> dict[str, Any]:
        res = {"cpu": cpu, "memory": "1Gi"}
        return {"name": f"ray-{role}", "image": "rayproject/ray:2.60.0",
                "resources": {"requests": res, "limits": res}}

    options: dict[str, Any] = {
        "version": "v2", "idleTimeoutSeconds": idle_seconds,
        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"},
                      "limits": {"cpu": "250m", "memory": "512Mi"}}}
    if autoscaler_env:
        options["env"] = [{"name": k, "value": v} for k, v in autoscaler_env.items()]
    return opted_in("RayCluster", name, {
        "enableInTreeAutoscaling": True,
        "autoscalerOptions": options,
        # no tasks on the head, as in KubeRay's autoscaling examples
        "headGroupSpec": {"rayStartParams": {"num-cpus": "0"},
                          "template": {"spec": {"containers": [container("head", "750m")]}}},
        "workerGroupSpecs": [{
            "groupName": "cpu", "replicas": min_workers, "minReplicas": min_workers,
            "maxReplicas": max_workers,
            "rayStartParams": {},
            "template": {"spec": {"containers": [container("worker", "1")]}},
        }],
    })


@dataclass
class RayCluster:
    namespace: str
    name: str
    runner: RayClusterRunner
    driver: RayProcess

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        self.runner.tier.check()
        return ray_driver.ask(self.driver, request)

    def joined_workers(self) -> set[str]:
        """Pod names of the worker nodes alive in Ray."""
        return {n["pod"] for n in self.ask({"op": "nodes"})["nodes"]
                if n["alive"] and n["pod"] != self.runner.head_pod}


@pytest.fixture
def ray_runner(e2e_stack: devstack.Stack,
               ray_tier: RayTier) -> Iterator[Callable[[str, str], RayClusterRunner]]:
    """ray_runner(namespace, cluster) -> a started RayClusterRunner for that RayCluster's pods
    (its head reachable through the stack's dashboard proxy); closed after the test."""
    runners: list[RayClusterRunner] = []
    ca = pki.ensure_ca(e2e_stack.pki_dir)  # the stack's CA signs the autoscaler's client certificate
    routes = dashboard_proxy.Routes(dashboard_proxy.routes_dir(e2e_stack.dir))

    def run(namespace: str, cluster: str) -> RayClusterRunner:
        runner = RayClusterRunner(ray_tier, e2e_stack.api, ca, namespace, cluster, routes).start()
        runners.append(runner)
        return runner

    yield run
    for runner in runners:
        runner.close()


@pytest.fixture
def ray_cluster(admin, ray_tier: RayTier,  # noqa: F811 - the fixture
                ray_runner: Callable[[str, str], RayClusterRunner]) -> Callable[..., RayCluster]:
    """ray_cluster(namespace, body) -> RayCluster: created, its head up in Ray, a driver connected."""
    def make(namespace: str, body: dict[str, Any]) -> RayCluster:
        name = body["metadata"]["name"]
        admin.create(RAYCLUSTERS.path(namespace), body)
        runner = ray_runner(namespace, name)
        wait_for(lambda: ray_tier.check() or runner.head_ready(), timeout=HEAD_TIMEOUT, interval=0.5,
                 message=lambda: f"the Ray head of {namespace}/{name} (API: {runner.last_api_error})",
                 fatal=(RayProcessError,))
        driver = ray_tier.spawn(f"{name}-driver", ray_driver.argv(runner.gcs_address, runner.head_temp_dir),
                                pipes=True)
        cluster = RayCluster(namespace, name, runner, driver)
        cluster.ask({"op": "nodes"})  # connected
        return cluster

    return make
