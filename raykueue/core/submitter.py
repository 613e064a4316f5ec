"""The submitter pod of a RayJob in K8sJobMode, as quota sees it.

KubeRay submits a RayJob in K8sJobMode (its default) from a batch Job's pod,
made once the RayJob's RayCluster is Ready (rayjob_controller.go,
createK8sJobIfNeed): from `spec.submitterPodTemplate` as written, or else one
container `ray-job-submitter` requesting 500m CPU / 200Mi (limits 1 / 1Gi). The
pod carries no Ray label and no stamp, so no raykueue webhook holds it.

raykueue reserves its quota with the head instead: the head pod's Workload gets
a second podSet `submitter` (count 1) describing this pod, so the quota is held
from the head's admission on, the submitter never waits once the cluster is up,
and it shares the head's priority. The description travels as an annotation
(`raykueue.io/submitter`): RayJob (written by its webhook) -> RayCluster (KubeRay
copies a RayJob's annotations) -> head template (the RayCluster's webhook) ->
head pod -> Workload. Pure functions; no I/O.

Its priority is the head's: a Workload has one priority, so the slot is admitted,
and can be preempted, only with the head, at the head's class (`ray-head` by
default, or the Ray owner's `kueue.x-k8s.io/priority-class`). Kueue's own RayJob
integration does the same (one Workload for head, workers and submitter, at the
RayJob's priority). A class of its own below the head's would need a Workload
of its own, admitted or preempted apart from the head: an admitted cluster could
then wait for its submitter, or lose it while its job runs, which is what
reserving with the head avoids.

The slot is held until the head's Workload goes, not handed back when the
submitter Job ends: Kueue v0.19.2 keeps its RayJob's `submitter` podSet until
the whole Workload finishes too (its RayJob reports no reclaimable pods). With
`shutdownAfterJobFinishes: true` (which Kueue requires of the RayJobs it admits)
that is when the job ends; without it, until the RayJob or its cluster is deleted.

When the head is evicted, the submitter pod KubeRay already started keeps
running, on nobody's quota, until its `ray job` command fails against the gone
head (at most KubeRay's backoffLimit + 1 pods, 2 + 1 by default); the next
admitted head reserves the slot again.
"""

from __future__ import annotations

import json
from typing import Any, Final

from raykueue.core import contract as c
from raykueue.core.objects import Obj

# What of a pod spec decides what Kueue charges (requests, overhead, sidecar
# restartPolicy) and which flavor it can take (node selection, tolerations).
_CONTAINER_KEYS: Final = ("name", "resources", "restartPolicy")
_SPEC_KEYS: Final = ("overhead", "resources", "nodeSelector", "affinity", "tolerations")


def mode(rayjob: Obj) -> str:
    """The RayJob's submissionMode; KubeRay's CRD defaults an absent one to K8sJobMode."""
    value = _dict(rayjob.get("spec")).get("submissionMode")
    return value if isinstance(value, str) and value else c.K8S_JOB_MODE


def uses_cluster_selector(rayjob: Obj) -> bool:
    return bool(_dict(_dict(rayjob.get("spec")).get("clusterSelector")))


def pod_spec(rayjob: Obj) -> dict[str, Any] | None:
    """The submitter pod's spec as quota sees it, or None when the RayJob runs no submitter pod."""
    if mode(rayjob) != c.K8S_JOB_MODE:
        return None
    template = _dict(rayjob.get("spec")).get("submitterPodTemplate")
    if not isinstance(template, dict):
        return {"containers": [{
            "name": c.DEFAULT_SUBMITTER_CONTAINER,
            "resources": {"requests": dict(c.DEFAULT_SUBMITTER_REQUESTS),
                          "limits": dict(c.DEFAULT_SUBMITTER_LIMITS)},
        }]}
    spec = _dict(template.get("spec"))
    out: dict[str, Any] = {
        key: [_container(x) for x in spec.get(key) or [] if isinstance(x, dict)]
        for key in ("containers", "initContainers")}
    if not out["initContainers"]:
        del out["initContainers"]
    if not out["containers"]:
        # KubeRay needs one; the CRD refuses a template without. Still a pod.
        out["containers"] = [{"name": c.DEFAULT_SUBMITTER_CONTAINER}]
    out.update({key: spec[key] for key in _SPEC_KEYS if spec.get(key)})
    return out


def encode(spec: dict[str, Any] | None) -> str | None:
    """The annotation's value: compact JSON with sorted keys, so equal specs give equal text."""
    if spec is None:
        return None
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def decode(value: object) -> dict[str, Any] | None:
    """The spec in an annotation's value; None for anything that is not a pod spec with containers."""
    if not isinstance(value, str) or not value:
        return None
    try:
        spec = json.loads(value)
    except ValueError:
        return None
    if not isinstance(spec, dict) or not isinstance(spec.get("containers"), list) or not spec["containers"]:
        return None
    if not all(isinstance(x, dict) and isinstance(x.get("name"), str) for x in spec["containers"]):
        return None
    return spec


def pod_set(spec: dict[str, Any]) -> dict[str, Any]:
    """The podSet that reserves the submitter's quota in the head's Workload."""
    return {"name": c.SUBMITTER_POD_SET, "count": 1, "template": {"spec": spec}}


def _container(container: Obj) -> dict[str, Any]:
    return {k: container[k] for k in _CONTAINER_KEYS if container.get(k)}


def _dict(value: object) -> Obj:
    return value if isinstance(value, dict) else {}
