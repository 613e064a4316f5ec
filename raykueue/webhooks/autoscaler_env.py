"""Keep Ray's autoscaler from recycling workers that wait for quota.

Ray's autoscaler (v2) counts a pod as allocated the moment it exists. If no Ray
node joins for it within RAY_AUTOSCALER_RECONCILE_ALLOCATE_STATUS_TIMEOUT_S
(3600 s in Ray 2.60, 300 s before), it deletes the pod through
`workersToDelete` and, while demand lasts, asks for a new one: a gated worker
waiting on Kueue's quota is deleted and re-created once per period. For an
opted-in RayCluster the wait is expected, so raykueue raises that timeout in
the autoscaler's env (`spec.autoscalerOptions.env`, which KubeRay copies into
the autoscaler container) unless the user set it: the user's value wins.

Pure: RayCluster spec in, JSON patch out; a second pass over a patched
cluster yields no ops. The RayCluster mutating webhook applies it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ALLOCATE_TIMEOUT_ENV = "RAY_AUTOSCALER_RECONCILE_ALLOCATE_STATUS_TIMEOUT_S"
# On the RayCluster, the value raykueue put into its env: a handback to Kueue
# (uninstall/plan.py) removes the variable only while it still holds that value,
# so a value the user set (before, or since) stays.
INJECTED_ANNOTATION = "raykueue.io/allocate-timeout"
# A day: a worker waiting that long for quota is still better kept than recycled.
DEFAULT_ALLOCATE_TIMEOUT_SECONDS = 86400

Patch = list[dict[str, Any]]


def allocate_timeout_patch(spec: Mapping[str, Any], timeout_seconds: int | None,
                           at: str = "/spec") -> Patch:
    """Ops adding the allocate timeout to a RayCluster whose in-tree autoscaler is on.

    No ops when the autoscaler is off, when `timeout_seconds` is None or not
    positive (the setting turned off), or when the env already names the
    variable (value or valueFrom: the user's choice, or our earlier pass).
    `at` is where the RayCluster spec sits (a RayJob's `spec.rayClusterSpec`, ...).
    A variable set through `autoscalerOptions.envFrom` cannot be seen here;
    KubeRay lists `env` after `envFrom`, so ours would win: set it in `env`.
    """
    if not spec.get("enableInTreeAutoscaling") or not timeout_seconds or timeout_seconds <= 0:
        return []
    var = {"name": ALLOCATE_TIMEOUT_ENV, "value": str(int(timeout_seconds))}
    options = spec.get("autoscalerOptions")
    if not isinstance(options, Mapping):
        return [{"op": "add", "path": f"{at}/autoscalerOptions", "value": {"env": [var]}}]
    env = options.get("env")
    if not isinstance(env, list) or not env:
        return [{"op": "add", "path": f"{at}/autoscalerOptions/env", "value": [var]}]
    if any(isinstance(e, Mapping) and e.get("name") == ALLOCATE_TIMEOUT_ENV for e in env):
        return []
    return [{"op": "add", "path": f"{at}/autoscalerOptions/env/-", "value": var}]
