"""The pod webhook's live read of a Ray owner its caches lack (webhooks/reads.py `OwnerReader`).

A new cluster's first pod can reach the webhook before raykueue's RayCluster
watch has delivered the RayCluster (KubeRay's own watch is a moment ahead).
Rather than refuse the pod (KubeRay would retry, but the user would see a
Warning naming raykueue), its review reads the owner once from the API server,
off the event loop. The object is kept as its cache keeps it, so the decision
is the one the cache would have given. Every read is counted by kind and result.
"""

from __future__ import annotations

import copy

from kubernetes.client import ApiClient, Configuration

from raykueue.app.metrics import OWNER_READS
from raykueue.core import contract as c
from raykueue.core.objects import Obj
from raykueue.core.rayobjects import slim_raycluster
from raykueue.kube import resources as r
from raykueue.kube.cache import Transform
from raykueue.kube.rest import ApiError, Rest
from raykueue.webhooks.reads import keep_metadata

# The Ray kinds a pod's owner chain passes through, with their resources' plurals.
OWNER_KINDS = ((c.RAYCLUSTER_KIND, "rayclusters"), (c.RAYJOB_KIND, "rayjobs"),
               (c.RAYSERVICE_KIND, "rayservices"))


def owner_transform(kind: str) -> Transform:
    """What an owner cache keeps of an object of `kind`, and so what a live read keeps.

    RayClusters in the shape the controller reads too (it borrows that watch).
    """
    return slim_raycluster if kind == c.RAYCLUSTER_KIND else keep_metadata(kind)


class OwnerReads:
    """GET one Ray owner: the object as its cache would keep it, None when it does not
    exist; any other failure is raised (the pod's review names it)."""

    def __init__(self, rest: Rest, ray_version: str) -> None:
        self.rest = rest
        self.resources = {kind: r.Resource(c.RAY_API_GROUP, ray_version, plural)
                          for kind, plural in OWNER_KINDS}
        self.transforms = {kind: owner_transform(kind) for kind, _ in OWNER_KINDS}

    @classmethod
    def connect(cls, config: Configuration, ray_version: str) -> OwnerReads:
        """With a client of its own without urllib3's retries (as the connect probe's): the
        timeout is then a real bound on a read, not one per retry."""
        reads_config = copy.deepcopy(config)
        reads_config.retries = False
        return cls(Rest(ApiClient(reads_config)), ray_version)

    def __call__(self, kind: str, namespace: str, name: str, timeout: float) -> Obj | None:
        try:
            found = self.rest.get(self.resources[kind].path(namespace, name), timeout=timeout)
        except ApiError as exc:
            OWNER_READS.labels(kind, "not_found" if exc.is_not_found else "error").inc()
            if exc.is_not_found:
                return None
            raise
        except Exception:
            OWNER_READS.labels(kind, "error").inc()
            raise
        OWNER_READS.labels(kind, "found").inc()
        return self.transforms[kind](found)
