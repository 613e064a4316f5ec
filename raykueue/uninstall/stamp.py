"""`raykueue stamp`: the way off the legacy pod webhook after an upgrade.

A RayCluster opted in before raykueue stamped pod templates makes pods without
the stamp, so they reach raykueue only through `mutate-legacy-pods` (failurePolicy
Ignore), which every other team's Ray pods reach too. raykueue's first webhook
stamps such a cluster's templates on its next update, whatever the update; this
command makes that update now, an empty JSON patch guarded by the cluster's uid,
for each one it finds. Once none is left the legacy entry can go, and then no pod
that did not opt in is ever sent to raykueue (manifests/README.md, upgrade).

KubeRay hashes pod templates only for a RayCluster with `upgradeStrategy.type:
Recreate`; such a cluster recreates its pods once for the stamp. The dry run names
those clusters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from raykueue.core import contract as c
from raykueue.core.objects import Obj, annotations, labels, metadata
from raykueue.kube.rest import ApiError, Rest
from raykueue.uninstall.plan import templates
from raykueue.uninstall.run import RAY

RAYCLUSTERS: Final = RAY[c.RAYCLUSTER_KIND]
LEGACY_WEBHOOK: Final = "mutate-legacy-pods.raykueue.io"
RECREATE: Final = "Recreate"
# How to leave the legacy entry out, as each install does it.
DROP_LEGACY: Final = (
    f"the legacy pod webhook ({LEGACY_WEBHOOK}) can go: kustomize, add the component "
    "manifests/components/no-legacy-pods; Helm, --set legacyPodWebhook=false")

# Exit codes: 0 none left (or a dry run), 1 a cluster could not be stamped.
OK, FAILED = 0, 1


@dataclass(frozen=True, slots=True)
class Unstamped:
    namespace: str
    name: str
    uid: str
    recreates_pods: bool

    def __str__(self) -> str:
        note = " (upgradeStrategy Recreate: KubeRay recreates its pods once)" if self.recreates_pods else ""
        return f"RayCluster {self.namespace}/{self.name}{note}"


def unstamped(clusters: Iterable[Obj]) -> list[Unstamped]:
    """Opted-in RayClusters with a pod template that lacks the stamp, sorted; none being deleted.

    One that carries Kueue's queue label (opted in before raykueue was installed) is
    Kueue's, admitted whole: the first webhook leaves it unstamped on purpose and its
    pods never were raykueue's, so it needs neither the stamp nor the legacy entry."""
    found = []
    for cluster in clusters:
        meta = metadata(cluster)
        if (meta.get("deletionTimestamp") or annotations(cluster).get(c.STANDALONE_ANNOTATION) != "true"
                or labels(cluster).get(c.QUEUE_LABEL)):
            continue
        if all(labels(t).get(c.OPTED_IN_LABEL) == c.OPTED_IN_VALUE
               for _, t in templates(cluster, c.RAYCLUSTER_KIND)):
            continue
        strategy = ((cluster.get("spec") or {}).get("upgradeStrategy") or {}).get("type")
        found.append(Unstamped(str(meta.get("namespace", "")), str(meta.get("name", "")),
                               str(meta.get("uid", "")), strategy == RECREATE))
    return sorted(found, key=lambda u: (u.namespace, u.name))


def nudge(cluster: Unstamped) -> list[dict[str, Any]]:
    """An update that changes nothing itself: raykueue's first webhook stamps on its way.
    The uid test keeps it off a namesake made since the list."""
    return [{"op": "test", "path": "/metadata/uid", "value": cluster.uid}]


def run(rest: Rest, *, act: bool, out: Callable[[str], None] = print) -> int:
    try:
        found = unstamped(rest.get(RAYCLUSTERS.path())["items"])
    except ApiError as exc:
        if not exc.is_not_found:
            raise
        found = []  # KubeRay's CRDs are not installed: no cluster to stamp
    if not found:
        out(f"raykueue stamp: every opted-in RayCluster is stamped; {DROP_LEGACY}")
        return OK
    out(f"raykueue stamp: {len(found)} opted-in RayCluster(s) with pod templates that lack "
        f"{c.OPTED_IN_LABEL} (their new pods reach raykueue through {LEGACY_WEBHOOK} only):")
    for cluster in found:
        out(f"  {cluster}")
    if not act:
        out("dry run, nothing changed: run again with --yes to have raykueue's first webhook "
            "stamp them (an empty update each)")
        return OK
    failed = 0
    for cluster in found:
        try:
            after = rest.json_patch(RAYCLUSTERS.path(cluster.namespace, cluster.name), nudge(cluster))
        except ApiError as exc:
            if _gone(rest, cluster):  # the uid test failed, or it was deleted: nothing to stamp
                out(f"  {cluster}: gone meanwhile")
                continue
            failed += 1
            out(f"  {cluster}: not stamped: {exc.message or exc}")
            continue
        if unstamped([after]):
            failed += 1
            out(f"  {cluster}: updated but still not stamped: is raykueue's aa-raykueue-first "
                "webhook configuration installed, and raykueue up?")
        else:
            out(f"  {cluster}: stamped")
    if failed:
        out(f"raykueue stamp: {failed} not stamped; run it again once raykueue answers")
        return FAILED
    out(f"raykueue stamp: all stamped; {DROP_LEGACY}")
    return OK


def _gone(rest: Rest, cluster: Unstamped) -> bool:
    try:
        now = rest.get(RAYCLUSTERS.path(cluster.namespace, cluster.name))
    except ApiError as exc:
        return exc.is_not_found
    return metadata(now).get("uid") != cluster.uid
