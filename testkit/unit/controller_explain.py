"""What tests/unit/controller/test_explain.py shares with other tests (so that no test module imports
another). That module: `raykueue explain POD`: the text a user reads.
"""

from __future__ import annotations

from raykueue.controller import decide as d
from raykueue.controller.facts import Facts
from testkit import controller_objects as o

LQ = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
      "metadata": {"name": "team-a", "namespace": "team-a"},
      "spec": {"clusterQueue": o.CQ},
      "status": {"pendingWorkloads": 2, "reservingWorkloads": 4, "admittedWorkloads": 4}}


CQ = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
      "metadata": {"name": o.CQ},
      "status": {"pendingWorkloads": 2, "reservingWorkloads": 4, "admittedWorkloads": 4,
                 "conditions": [{"type": "Active", "status": "True", "reason": "Ready",
                                 "message": "Can admit new workloads"}]}}


CTX = d.Context(priority_values={"ray-worker": 100, "ray-head": 1000}, head_admitted=True)


def facts(pod: dict, *workloads: dict, context: d.Context = CTX) -> Facts:
    return Facts(pod, list(workloads), context)
