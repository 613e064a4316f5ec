"""kube.resources: paths and discovery."""

from __future__ import annotations

from typing import Any

import pytest

from raykueue.kube.resources import (
    EVENTS_V1,
    LEASES,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    NAMESPACES,
    PODS,
    Resource,
    crd,
    served_versions,
)
from raykueue.kube.rest import ApiError


def test_core_group_paths() -> None:
    assert PODS.path() == "/api/v1/pods"
    assert PODS.path("ns") == "/api/v1/namespaces/ns/pods"
    assert PODS.path("ns", "p") == "/api/v1/namespaces/ns/pods/p"
    assert PODS.path("ns", "p", "status") == "/api/v1/namespaces/ns/pods/p/status"
    assert PODS.api_version == "v1"


def test_named_group_paths() -> None:
    assert LEASES.path("kube-system", "l") == \
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l"
    assert EVENTS_V1.api_version == "events.k8s.io/v1"


def test_cluster_scoped_paths() -> None:
    assert NAMESPACES.path() == "/api/v1/namespaces"
    assert NAMESPACES.path(name="team-a") == "/api/v1/namespaces/team-a"
    assert MUTATING_WEBHOOK_CONFIGURATIONS.path(name="w") == \
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/w"
    with pytest.raises(ValueError):
        NAMESPACES.path("ns")


def test_path_misuse_is_caught() -> None:
    with pytest.raises(ValueError):
        PODS.path(name="p")  # a namespaced object needs its namespace
    with pytest.raises(ValueError):
        PODS.path("ns", subresource="status")
    with pytest.raises(ValueError):
        PODS.path("ns", "..")
    assert PODS.path("ns", "a/b").endswith("/pods/a%2Fb")
    assert Resource("rbac.authorization.k8s.io", "v1", "clusterroles", False).path(
        name="system:x").endswith("/clusterroles/system:x")


def test_crd_factory_and_version_switch() -> None:
    wl = crd("kueue.x-k8s.io", "v1beta1", "workloads")
    assert wl.path("ns", "w") == "/apis/kueue.x-k8s.io/v1beta1/namespaces/ns/workloads/w"
    assert wl.at_version("v1beta2").path("ns") == \
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads"
    assert crd("g.io", "v1", "things", namespaced=False).path(name="t") == \
        "/apis/g.io/v1/things/t"
    with pytest.raises(ValueError):
        crd("", "v1", "pods")


class Discovery:
    def __init__(self, docs: dict[str, Any]) -> None:
        self.docs = docs

    def get(self, path: str, query: Any = None) -> Any:
        if path not in self.docs:
            raise ApiError(404, "NotFound")
        return self.docs[path]


def test_served_versions_preferred_first() -> None:
    rest = Discovery({"/apis/kueue.x-k8s.io": {
        "kind": "APIGroup", "name": "kueue.x-k8s.io",
        "versions": [{"groupVersion": "kueue.x-k8s.io/v1beta1", "version": "v1beta1"},
                     {"groupVersion": "kueue.x-k8s.io/v1beta2", "version": "v1beta2"}],
        "preferredVersion": {"groupVersion": "kueue.x-k8s.io/v1beta2", "version": "v1beta2"}}})
    assert served_versions(rest, "kueue.x-k8s.io") == ["v1beta2", "v1beta1"]  # type: ignore[arg-type]


def test_served_versions_missing_group_and_core() -> None:
    rest = Discovery({"/api": {"kind": "APIVersions", "versions": ["v1"]}})
    assert served_versions(rest, "ray.io") == []  # type: ignore[arg-type]
    assert served_versions(rest, "") == ["v1"]  # type: ignore[arg-type]


def test_served_versions_other_errors_propagate() -> None:
    class Broken:
        def get(self, path: str, query: Any = None) -> Any:
            raise ApiError(403, "Forbidden")

    with pytest.raises(ApiError):
        served_versions(Broken(), "ray.io")  # type: ignore[arg-type]
