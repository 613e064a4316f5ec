"""What tests/e2e/test_handover.py shares with other tests (so that no test module imports another). That
module: A namespace turned Kueue-managed after the opt-in: raykueue hands the cluster over (issue 28).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

import devstack
from devstack.controlplane.kubeapi import object_path
from devstack.kueue.shipped import manager_config_map, shipped_module
from raykueue.core import contract as c
from raykueue.kube.cache import ADDED, DELETED, WatchCache
from raykueue.kube.resources import EVENTS_V1, NAMESPACES, PODS
from raykueue.kube.rest import Rest
from testkit.e2e.controller import (
    WORKLOADS,
)
from testkit.e2e.kueue_restart import restart_kueue
from testkit.watches import Watching

MANAGED = {"kueue-managed": "true"}


POLICY = "raykueue-gated-at-creation"


@pytest.fixture(scope="module")
def kueue_takes_labelled_namespaces(e2e_stack: devstack.Stack, admin: Rest) -> Iterator[None]:
    """manageJobsWithoutQueueName with the documented label selector, for this module only."""
    module = shipped_module(e2e_stack.config.kueue_version)
    config_file = e2e_stack.dir / "kueue" / "config.yaml"
    original = config_file.read_text()
    config = yaml.safe_load(original)
    config["manageJobsWithoutQueueName"] = True
    config["managedJobsNamespaceSelector"] = {"matchLabels": dict(MANAGED)}

    def use(text: str) -> None:
        config_file.write_text(text)
        cm = manager_config_map(text, module.namespace)
        e2e_stack.api.apply(object_path(cm), cm)
        restart_kueue(e2e_stack)

    # devstack's readiness probe for Kueue is a dry-run Job its webhook must default
    # in the sample LocalQueue's namespace: that namespace has to stay selected.
    probed = NAMESPACES.path(None, e2e_stack.config.samples.local_queue_namespace)
    admin.merge_patch(probed, {"metadata": {"labels": MANAGED}})
    try:
        use(yaml.safe_dump(config, sort_keys=False))
        yield
    finally:
        use(original)
        admin.merge_patch(probed, {"metadata": {"labels": {key: None for key in MANAGED}}})


def blocker(ns: str, cpu: str) -> dict[str, Any]:
    """A Workload of another job in the same LocalQueue, holding `cpu` until deleted."""
    container = {"name": "c", "image": "busybox",
                 "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}
    return {"apiVersion": WORKLOADS.api_version, "kind": "Workload",
            "metadata": {"name": "other-job", "namespace": ns},
            "spec": {"queueName": "team-a", "podSets": [
                {"name": "main", "count": 1,
                 "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}]}}


class Course(Watching):
    """What happens to the namespace's pods from start to end, and the counters around it."""

    def __init__(self, api: Rest, stack: devstack.Stack, ns: str, controller_server) -> None:
        self.admin, self.stack, self.ns, self.controller = api, stack, ns, controller_server
        self.handed_over = threading.Event()
        self.violations: list[str] = []
        self.created: list[str] = []
        self.deleted: list[str] = []
        self._lock = threading.Lock()
        self.pods = WatchCache(api, PODS, namespace=ns)
        self.pods.add_handler(self._pod)
        self.caches = (self.pods,)

    def _pod(self, event: str, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        with self._lock:
            if event == ADDED:
                self.created.append(name)
                if self.handed_over.is_set() and (
                        pod["metadata"].get("labels", {}).get(c.OPTED_IN_LABEL) or c.GATE in gates_of(pod)):
                    self.violations.append(f"pod {name} created stamped or gated after the hand-over")
            elif event == DELETED:
                self.deleted.append(name)

    def refusals(self) -> dict[str, float]:
        """The API server's counts of pods refused by raykueue's policy or pod webhooks.

        (The RayCluster webhooks' rejections are left out: the test's own probe is one.)
        """
        _, body = self.stack.api.request("GET", "/metrics")
        out: dict[str, float] = {}
        for line in body.decode().splitlines():
            series, _, value = line.rpartition(" ")
            if (series.startswith("apiserver_validating_admission_policy_check_total{")
                    and f'policy="{POLICY}"' in series and 'enforcement_action="deny"' in series) or (
                    series.startswith("apiserver_admission_webhook_rejection_count{")
                    and re.search(r'name="[^"]*pods[^"]*raykueue', series)):
                out[series] = float(value)
        return out

    def evictions(self) -> float:
        return self.controller.metric_total("raykueue_pods_evicted_total")

    def __enter__(self) -> Course:
        super().__enter__()
        self.refused_before, self.evicted_before = self.refusals(), self.evictions()
        return self


def gates_of(pod: dict[str, Any]) -> list[str]:
    return [g.get("name") for g in pod.get("spec", {}).get("schedulingGates") or []]


def events(admin: Rest, ns: str) -> list[dict[str, Any]]:
    return admin.get(EVENTS_V1.path(ns))["items"]
