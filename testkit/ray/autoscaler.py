"""What tests/ray/test_autoscaler.py shares with other tests (so that no test module imports another). That
module: The real Ray autoscaler (v2) drives raykueue: scenarios judged through the API and Ray.
"""

from __future__ import annotations

from testkit.e2e.controller import RAYCLUSTERS
from testkit.raycluster import RayCluster

# Workers start one at a time (devstack.ray.runner); on an idle machine 4 join
# in seconds, on a busy 2-core one each start can take a minute and a retry.
JOIN_TIMEOUT = 300


def replicas(admin, cluster: RayCluster) -> int:
    rc = admin.get(RAYCLUSTERS.path(cluster.namespace, cluster.name))
    return rc["spec"]["workerGroupSpecs"][0].get("replicas", 0)
