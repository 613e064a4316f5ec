"""Kueue's Configuration, as far as it decides whether Kueue touches a Ray cluster.

Read from the ConfigMap Kueue's install mounts (`kueue-system/kueue-manager-config`,
key `controller_manager_config.yaml`). Defaults are Kueue v0.19.2's
(`apis/config/v1beta2/defaults.go`): `manageJobsWithoutQueueName` false, the
managed-namespace selector excludes kube-system and kueue-system, and in v1beta2
`waitForPodsReady` is on unless the `DisableWaitForPodsReady` feature gate is
(`pkg/util/waitforpodsready`); v1beta1 needs `waitForPodsReady.enable: true`.
When the ConfigMap cannot be read, Kueue is assumed to run as shipped, and
`read_configuration` says why, for a finding (never silently: Kueue's Helm
chart names it `<release>-manager-config` in the release namespace, and the
namespace and name raykueue reads are settings).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from raykueue.core import contract as c
from raykueue.core.selectors import matches

CONFIG_KEY = "controller_manager_config.yaml"

# Kueue's own config/components/manager/controller_manager_config.yaml (v0.19.2).
SHIPPED_FRAMEWORKS = (
    "batch/job", "kubeflow.org/mpijob", "ray.io/rayjob", "ray.io/raycluster", "ray.io/rayservice",
    "jobset.x-k8s.io/jobset", "workload.codeflare.dev/appwrapper", "trainer.kubeflow.org/trainjob",
    "pod", "deployment", "statefulset", "leaderworkerset.x-k8s.io/leaderworkerset",
)
DEFAULT_MANAGED_NAMESPACES: Mapping[str, Any] = {
    "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                          "values": ["kube-system", "kueue-system"]}],
}
_RAY_FRAMEWORKS = {
    "ray.io/raycluster": c.RAYCLUSTER_KIND,
    "ray.io/rayjob": c.RAYJOB_KIND,
    "ray.io/rayservice": c.RAYSERVICE_KIND,
}


class BadConfig(ValueError):
    """The ConfigMap holds something that is not a Kueue Configuration."""


@dataclass(frozen=True, slots=True)
class KueueSetup:
    frameworks: frozenset[str]
    manage_jobs_without_queue_name: bool
    managed_namespaces: Mapping[str, Any] | None
    wait_for_pods_ready: bool
    source: str  # where this came from, for messages

    @property
    def ray_kinds(self) -> frozenset[str]:
        """RayCluster/RayJob/RayService kinds whose Kueue integration is on."""
        return frozenset(kind for fw, kind in _RAY_FRAMEWORKS.items() if fw in self.frameworks)

    @property
    def pod_integration(self) -> bool:
        return "pod" in self.frameworks

    def manages_unqueued_in(self, namespace: Mapping[str, str]) -> bool:
        """Whether Kueue takes jobs without a queue label in the namespace with these labels.

        Judged by the namespace's labels, as Kueue's managedJobsNamespaceSelector
        reads them (Kueue's documented selector is `kueue-managed=true`).
        """
        return self.manage_jobs_without_queue_name and matches(self.managed_namespaces, namespace)


ASSUMED = KueueSetup(frozenset(SHIPPED_FRAMEWORKS), False, DEFAULT_MANAGED_NAMESPACES, True,
                     "assumed: Kueue as shipped (its Configuration was not readable)")


def parse(text: str, source: str) -> KueueSetup:
    try:
        cfg = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise BadConfig(f"{source}: not YAML: {exc}") from exc
    if not isinstance(cfg, dict) or cfg.get("kind") != "Configuration":
        raise BadConfig(f"{source}: not a Kueue Configuration")
    api_version = str(cfg.get("apiVersion", ""))
    integrations = cfg.get("integrations") or {}
    frameworks = integrations.get("frameworks")
    if frameworks is None:
        frameworks = ["batch/job"]  # Kueue's default when the list is absent
    selector = cfg.get("managedJobsNamespaceSelector", DEFAULT_MANAGED_NAMESPACES)
    gates = cfg.get("featureGates") or {}
    wfpr = cfg.get("waitForPodsReady")
    if api_version.endswith("/v1beta1"):
        wait = isinstance(wfpr, dict) and wfpr.get("enable") is True
    else:
        wait = gates.get("DisableWaitForPodsReady") is not True
    return KueueSetup(frozenset(str(f) for f in frameworks),
                      bool(cfg.get("manageJobsWithoutQueueName", False)), selector, wait, source)


def writes_pods_ready(setting: str, read_setup: Callable[[], KueueSetup | None]) -> bool:
    """Whether the controller writes PodsReady: forced by the setting ("true", "false"),
    else ("auto") what Kueue reads, asked of `read_setup` only then.

    A setup not read yet (None) is a yes: a needless write costs one call, a missing
    one an eviction by waitForPodsReady.
    """
    if setting != "auto":
        return setting == "true"
    setup = read_setup()
    return setup is None or setup.wait_for_pods_ready


def read_configuration(config_map: Mapping[str, Any] | None, source: str,
                       error: str | None = None) -> tuple[KueueSetup, str | None]:
    """Kueue's setup from its ConfigMap, and why it could not be read (None when it was).

    `error` is why the ConfigMap could not be fetched at all (forbidden, say);
    None with no ConfigMap means the API server has none of that name.
    """
    if error is not None:
        return ASSUMED, f"not readable: {error}"
    if config_map is None:
        return ASSUMED, "not found"
    text = (config_map.get("data") or {}).get(CONFIG_KEY)
    if text is None:
        return ASSUMED, f"has no key {CONFIG_KEY}"
    try:
        return parse(text, source), None
    except BadConfig as exc:
        return ASSUMED, str(exc)
