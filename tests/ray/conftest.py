"""The Ray tier: the e2e stack plus real Ray for its pods and the real autoscaler.

The e2e fixtures (admin client, raykueue's webhooks and controller, a fresh
queue per test) come from tests/e2e; this adds `ray_tier` (every Ray process of
a test, stopped and checked for leftovers after it), `ray_runner` (Ray for
the pods of a RayCluster, by name) and `ray_cluster` (an opted-in, autoscaled
RayCluster with Ray running for its pods). The RayCluster body, the running
cluster's handle and the watch that counts churn are testkit/raycluster.py's
(bench/elastic.py runs the same).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import devstack
from devstack.controlplane import pki
from devstack.ray import dashboard_proxy
from devstack.ray import driver as ray_driver
from devstack.ray.procs import RayProcessError
from devstack.ray.runner import RayClusterRunner, RayTier
from testkit.e2e.controller import (  # noqa: F401 - fixtures
    RAYCLUSTERS,
    admin,
    controller,
    queue,
    webhooks,
)
from testkit.ray.figures import FIGURES
from testkit.raycluster import HEAD_TIMEOUT, RayCluster
from testkit.waiting import wait_for


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
