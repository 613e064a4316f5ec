"""What tests/api/test_scope.py shares with other tests (so that no test module imports another). That
module: Scope by construction, on the real API server: what waits for raykueue, and what never does.
"""

from __future__ import annotations

from typing import Any

from raykueue.core import contract as c
from raykueue.webhooks.autoscaler_env import ALLOCATE_TIMEOUT_ENV
from testkit.e2e.controller import raycluster

RAY = "/apis/ray.io/v1/namespaces/{ns}/{plural}"


STAMPED = {c.OPTED_IN_LABEL: c.OPTED_IN_VALUE}


OPTED_IN = {c.STANDALONE_ANNOTATION: "true"}


def ray_object(kind: str, name: str, *, annotations: dict[str, str] | None = None,
               labels: dict[str, str] | None = None, stamped: bool = False,
               autoscaling: bool = True, suspend: bool = False) -> dict[str, Any]:
    """`suspend`: KubeRay (on the e2e stack) makes no pods for it."""
    cluster = raycluster(name, 1)
    spec = cluster["spec"]
    if autoscaling:
        spec["enableInTreeAutoscaling"] = True
        spec["autoscalerOptions"] = {"env": [{"name": ALLOCATE_TIMEOUT_ENV, "value": "86400"}]}
    if suspend:
        spec["suspend"] = True
    for template in [spec["headGroupSpec"]["template"]] + [g["template"] for g in spec["workerGroupSpecs"]]:
        template["metadata"] = {"labels": dict(STAMPED) if stamped else {}}
    meta = {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {})}
    if kind == "RayCluster":
        return {**cluster, "metadata": meta}
    spec.pop("suspend", None)
    if kind == "RayJob":
        return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta,
                # Kueue's validating webhook asks this of a RayJob it manages (e2e stack).
                "spec": {"entrypoint": "python -c 'print(1)'", "submissionMode": "SidecarMode",
                         "shutdownAfterJobFinishes": True, "rayClusterSpec": spec, "suspend": suspend}}
    return {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": meta,
            "spec": {"rayClusterConfig": spec}}


def path(ns: str, kind: str, name: str = "") -> str:
    return RAY.format(ns=ns, plural=kind.lower() + "s") + (f"/{name}" if name else "")
