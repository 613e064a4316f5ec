"""GitOps: applying the same manifests again changes nothing, loses nothing, upgrades nothing.

The manifests are the README's form (examples/raycluster.yaml, and a RayJob and a
RayService written the same way): the opt-in and `raykueue.io/queue-name` on the
object, and on a RayCluster what raykueue keeps inside the lists a re-apply
replaces whole (the stamp on each pod template, the autoscaler's allocate timeout).
Each is applied twice, client-side (`kubectl apply`: a JSON merge patch computed
from last-applied, the manifest and the live object) and server-side
(`kubectl apply --server-side`). The second apply must write nothing: kubectl
finds nothing to send, or the API server stores nothing (the applier's
managedFields entry keeps its time, the generation stays); raykueue's stamp,
allocate timeout and queue are all still there; the RayService keeps its one
RayCluster and starts no upgrade.

The same RayCluster written minimally (no stamp, no allocate timeout) is applied
twice too: its second apply writes (kubectl replaces the two lists and raykueue's
first webhook puts back what it keeps there), but the spec, and so the
generation, stays the same and nothing is lost.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from raykueue.core import contract as c
from raykueue.kube.rest import Rest
from raykueue.webhooks.autoscaler_env import ALLOCATE_TIMEOUT_ENV
from testkit.e2e.controller import RAYCLUSTERS, admin, webhooks  # noqa: F401 - fixtures
from testkit.e2e.kueue_shipped import RAYJOBS, RAYSERVICES, _owned_cluster
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "raycluster.yaml"
RESOURCES = {"RayCluster": RAYCLUSTERS, "RayJob": RAYJOBS, "RayService": RAYSERVICES}
# kubectl's field managers
MANAGER = {"client-side": "kubectl-client-side-apply", "server-side": "kubectl"}


def example(ns: str) -> dict[str, Any]:
    obj = yaml.safe_load(EXAMPLE.read_text())
    obj["metadata"]["namespace"] = ns
    return obj


def minimal(ns: str) -> dict[str, Any]:
    """The example without what raykueue adds inside replaced lists."""
    obj = example(ns)
    obj["metadata"]["name"] = "minimal"
    spec = obj["spec"]
    del spec["autoscalerOptions"]
    for template in _templates(spec):
        del template["metadata"]
    return obj


def rayjob(ns: str) -> dict[str, Any]:
    cluster = example(ns)
    spec = _plain(cluster["spec"])
    # What KubeRay itself writes back into a RayJob's spec (its full-object Update
    # when it adds its finalizer serializes these zero values): spelled out, so that
    # only raykueue's part is on trial here.
    for template in _templates(spec):
        template["metadata"] = {}
    for group in spec["workerGroupSpecs"]:
        group["scaleStrategy"] = {}
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": "job", "namespace": ns,
                         "annotations": cluster["metadata"]["annotations"]},
            "spec": {"entrypoint": "python -c 'print(1)'", "submissionMode": "SidecarMode",
                     "ttlSecondsAfterFinished": 0, "backoffLimit": 0, "rayClusterSpec": spec}}


def rayservice(ns: str) -> dict[str, Any]:
    cluster = example(ns)
    return {"apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": "svc", "namespace": ns,
                         "annotations": cluster["metadata"]["annotations"]},
            "spec": {"rayClusterConfig": _plain(cluster["spec"])}}


def _plain(spec: dict[str, Any]) -> dict[str, Any]:
    """A RayJob's or RayService's cluster spec: raykueue leaves it as written (KubeRay
    copies it to the RayCluster, which raykueue stamps), so it holds nothing of ours."""
    spec = copy.deepcopy(spec)
    del spec["autoscalerOptions"]
    for template in _templates(spec):
        del template["metadata"]
    return spec


def _templates(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [spec["headGroupSpec"]["template"]] + [g["template"] for g in spec["workerGroupSpecs"]]


def apply(kubectl, obj: dict[str, Any], mode: str) -> str:
    args = ["apply", "-f", "-"] + (["--server-side"] if mode == "server-side" else [])
    out = kubectl(*args, input=json.dumps(obj))
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def manager_entry(obj: dict[str, Any], manager: str) -> list[dict[str, Any]]:
    return [e for e in obj["metadata"].get("managedFields") or []
            if e["manager"] == manager and not e.get("subresource")]


def kept_by_raykueue(obj: dict[str, Any]) -> None:
    assert obj["metadata"]["annotations"][c.QUEUE_ANNOTATION] == "team-a"
    assert c.QUEUE_LABEL not in (obj["metadata"].get("labels") or {})
    spec = obj["spec"]
    assert [t["metadata"]["labels"][c.OPTED_IN_LABEL] for t in _templates(spec)] == ["true", "true"]
    assert {"name": ALLOCATE_TIMEOUT_ENV, "value": "86400"} in spec["autoscalerOptions"]["env"]


@pytest.fixture
def ns(new_namespace, webhooks) -> Iterator[str]:  # noqa: F811
    yield new_namespace("gitops")


@pytest.mark.parametrize("mode", ["client-side", "server-side"])
def test_reapplying_the_readme_manifests_changes_nothing(
        admin: Rest, kubectl, ns: str, mode: str) -> None:  # noqa: F811
    manifests = [example(ns), rayjob(ns), rayservice(ns)]
    for obj in manifests:
        apply(kubectl, obj, mode)
    service_cluster = _owned_cluster(admin, ns, "RayService", "svc")
    job_cluster = _owned_cluster(admin, ns, "RayJob", "job")
    for name in ("sample", service_cluster, job_cluster):
        kept_by_raykueue(admin.get(RAYCLUSTERS.path(ns, name)))
    before = {obj["kind"]: admin.get(RESOURCES[obj["kind"]].path(ns, obj["metadata"]["name"]))
              for obj in manifests}

    for obj in manifests:
        said = apply(kubectl, obj, mode)
        if mode == "client-side":
            assert said.endswith("unchanged"), said  # nothing to send

    for obj in manifests:
        kind = obj["kind"]
        after = admin.get(RESOURCES[kind].path(ns, obj["metadata"]["name"]))
        # Nothing stored: the spec, and the applier's own record of its last write.
        assert after["metadata"]["generation"] == before[kind]["metadata"]["generation"], kind
        assert manager_entry(after, MANAGER[mode]) == manager_entry(before[kind], MANAGER[mode]), kind
        assert after["spec"] == before[kind]["spec"], kind
        assert after["metadata"].get("labels") == before[kind]["metadata"].get("labels"), kind
        assert after["metadata"]["annotations"] == before[kind]["metadata"]["annotations"], kind
    kept_by_raykueue(admin.get(RAYCLUSTERS.path(ns, "sample")))
    # The RayService starts no upgrade: its status names one RayCluster (pending
    # until its head is admitted, then active), and only one exists.
    status = admin.get(RAYSERVICES.path(ns, "svc")).get("status") or {}
    named = {(status.get(which) or {}).get("rayClusterName")
             for which in ("activeServiceStatus", "pendingServiceStatus")} - {None, ""}
    assert named == {service_cluster}, status
    owned = [rc["metadata"]["name"] for rc in admin.get(RAYCLUSTERS.path(ns))["items"]
             if any(ref["kind"] == "RayService" for ref in rc["metadata"].get("ownerReferences") or [])]
    assert owned == [service_cluster]


@pytest.mark.parametrize("mode", ["client-side", "server-side"])
def test_a_minimal_manifest_loses_nothing_on_reapply(
        admin: Rest, kubectl, ns: str, mode: str) -> None:  # noqa: F811
    obj = minimal(ns)
    apply(kubectl, obj, mode)
    first = admin.get(RAYCLUSTERS.path(ns, "minimal"))
    kept_by_raykueue(first)  # raykueue added them on creation
    apply(kubectl, obj, mode)
    again = admin.get(RAYCLUSTERS.path(ns, "minimal"))
    kept_by_raykueue(again)  # the re-apply dropped them, raykueue's first webhook put them back
    assert again["metadata"]["generation"] == first["metadata"]["generation"]
    assert again["spec"] == first["spec"]
    wrote = again["metadata"]["resourceVersion"] != first["metadata"]["resourceVersion"]
    print(f"\n[gitops] minimal RayCluster, {mode} re-apply: "
          f"{'a write (managedFields only)' if wrote else 'no write'}, generation unchanged")


def test_a_minimal_manifest_gets_its_allocate_timeout_back_after_a_patch_drops_it(
        admin: Rest, kubectl, ns: str) -> None:  # noqa: F811
    """Not only on CREATE: an update that drops the variable reaches raykueue and gets it back."""
    apply(kubectl, minimal(ns), "client-side")
    patched = admin.merge_patch(RAYCLUSTERS.path(ns, "minimal"), {"spec": {"autoscalerOptions": {"env": []}}})
    kept_by_raykueue(patched)
