"""What tests/unit/uninstall/test_plan.py shares with other tests (so that no test module imports another).
That module: raykueue/uninstall/plan.py: what the uninstall decides from a snapshot (the e2e tier acts on
it).
"""

from __future__ import annotations

from typing import Any

import jsonpatch

from raykueue.core import contract as c

NS = "team-a"


def cluster_spec(*, autoscaling: bool = False, template_annotations: dict[str, str] | None = None
                 ) -> dict[str, Any]:
    def template() -> dict[str, Any]:
        meta: dict[str, Any] = {"labels": {"raykueue.io/opted-in": "true", "app": "x"}}
        if template_annotations:
            meta["annotations"] = dict(template_annotations)
        return {"metadata": meta, "spec": {"containers": [{"name": "ray"}]}}

    spec: dict[str, Any] = {"headGroupSpec": {"template": template()},
                            "workerGroupSpecs": [{"groupName": "cpu", "template": template()}]}
    if autoscaling:
        spec["enableInTreeAutoscaling"] = True
    return spec


def obj(kind: str, name: str, *, opted_in: bool = True, queue: str | None = "q", suspend: bool = False,
        uid: str | None = None, owner: tuple[str, str, str] | None = None, **spec: Any) -> dict[str, Any]:
    annotations: dict[str, str] = {}
    if opted_in:
        annotations[c.STANDALONE_ANNOTATION] = "true"
    if queue:
        annotations[c.QUEUE_ANNOTATION] = queue
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": uid or f"uid-{kind}-{name}",
                            "annotations": annotations, "labels": {"team": "a"}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": owner[0], "name": owner[1],
                                    "uid": owner[2], "controller": True}]
    cluster = spec.pop("cluster", None) or cluster_spec()
    body: dict[str, Any] = {"kind": kind, "metadata": meta}
    if kind == c.RAYCLUSTER_KIND:
        body["spec"] = {**cluster, **({"suspend": True} if suspend else {})}
    elif kind == c.RAYJOB_KIND:
        body["spec"] = {"rayClusterSpec": cluster, "shutdownAfterJobFinishes": True, "suspend": suspend}
    else:
        body["spec"] = {"rayClusterConfig": cluster}
    body["spec"].update(spec)
    return body


def apply_all(body: dict[str, Any], patches: list[list[dict[str, Any]]]) -> dict[str, Any]:
    for ops in patches:
        body = jsonpatch.apply_patch(body, ops)
    return body
