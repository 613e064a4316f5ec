"""Setups in which Kueue and raykueue could both count a pod, or Kueue could take an opted-in cluster.

A pure function of Kueue's setup and the mutating webhook configurations the
API server holds. Each finding names what to change, and never a cluster-wide
Kueue setting: per namespace or per object only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from raykueue.coexist.kueueconfig import KueueSetup
from raykueue.core import contract as c

_RAY_RESOURCES = ("rayclusters", "rayjobs", "rayservices")
KINDS = ("KueueManagesJobsWithoutQueue", "RaykueueWebhookMissing", "WebhookOrder", "KueueWebhookReinvoked",
         "KueueConfigurationUnread")


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    message: str


def _covers(hook: Mapping[str, Any], group: str, resource: str) -> bool:
    for rule in hook.get("rules") or []:
        groups, resources = rule.get("apiGroups") or [], rule.get("resources") or []
        if (group in groups or "*" in groups) and (resource in resources or "*" in resources):
            return True
    return False


def findings(setup: KueueSetup, mutating: Iterable[Mapping[str, Any]]) -> list[Finding]:
    configs = list(mutating)
    names = {(cfg.get("metadata") or {}).get("name") for cfg in configs}
    out: list[Finding] = []
    if setup.manage_jobs_without_queue_name and setup.ray_kinds:
        out.append(Finding("KueueManagesJobsWithoutQueue", (
            f"{setup.source}: manageJobsWithoutQueueName is true, so Kueue admits every "
            f"{'/'.join(sorted(setup.ray_kinds))} as a whole in the namespaces its "
            "managedJobsNamespaceSelector selects, opted in or not; raykueue leaves those clusters' "
            "pods to Kueue. Run opted-in clusters in namespaces that selector leaves out")))
    if setup.ray_kinds:
        for name in (c.FIRST_MUTATING_WEBHOOK_CONFIG, c.MUTATING_WEBHOOK_CONFIG):
            if name not in names:
                out.append(Finding("RaykueueWebhookMissing", (
                    f"MutatingWebhookConfiguration {name} is not registered: Kueue's Ray integrations "
                    "are on, and without it Kueue suspends opted-in clusters and admits them whole. "
                    "Apply raykueue's manifests/webhooks.yaml")))
    ours_reinvoked = {resource: _reinvoked(configs, resource) for resource in ("pods", *_RAY_RESOURCES)}
    for cfg in configs:
        name = str((cfg.get("metadata") or {}).get("name", ""))
        if name in (c.FIRST_MUTATING_WEBHOOK_CONFIG, c.MUTATING_WEBHOOK_CONFIG):
            continue
        hooks = cfg.get("webhooks") or []
        ray_hooks = [h for h in hooks if h.get("name", "").endswith(".kb.io")
                     and any(_covers(h, c.RAY_API_GROUP, r) for r in _RAY_RESOURCES)]
        if ray_hooks and not (c.FIRST_MUTATING_WEBHOOK_CONFIG < name < c.MUTATING_WEBHOOK_CONFIG):
            out.append(Finding("WebhookOrder", (
                f"MutatingWebhookConfiguration {name} (Kueue's Ray webhooks) does not sort between "
                f"{c.FIRST_MUTATING_WEBHOOK_CONFIG} and {c.MUTATING_WEBHOOK_CONFIG}; the API server calls "
                "them in name order, so raykueue cannot hide opted-in clusters from it")))
        for hook in hooks:
            if hook.get("reinvocationPolicy") != "IfNeeded" or not hook.get("name", "").endswith(".kb.io"):
                continue
            # Kueue's webhook, reinvoked after ours, takes the object again; the API
            # server then reinvokes ours only if ours is IfNeeded too (k8s.io/apiserver
            # admission/plugin/webhook/mutating/dispatcher.go), which manifests/ ships.
            for resource, reinvoked in ours_reinvoked.items():
                group = "" if resource == "pods" else c.RAY_API_GROUP
                if _covers(hook, group, resource) and not reinvoked:
                    out.append(Finding("KueueWebhookReinvoked", (
                        f"Kueue's webhook {hook.get('name')} in {name} has reinvocationPolicy IfNeeded "
                        f"but raykueue's webhook for {resource} in {c.MUTATING_WEBHOOK_CONFIG} does not: "
                        "the API server reinvokes Kueue's after ours and it takes opted-in objects "
                        f"again. Set reinvocationPolicy: IfNeeded on raykueue's (as manifests/webhooks.yaml "
                        "ships it), or Never on Kueue's")))
                    break
    return out


def unread(source: str, problem: str) -> Finding:
    """Kueue's Configuration could not be read: what raykueue assumes instead, and the fix."""
    return Finding("KueueConfigurationUnread", (
        f"Kueue's Configuration ({source}, key controller_manager_config.yaml) {problem}. "
        "raykueue assumes Kueue as shipped (its Ray and pod integrations on, "
        "manageJobsWithoutQueueName false, waitForPodsReady on), which may not be this Kueue. "
        "If Kueue reads another ConfigMap (Kueue's Helm chart: <release>-manager-config in the "
        "release namespace), name it with RAYKUEUE_KUEUE_NAMESPACE and RAYKUEUE_KUEUE_CONFIG_MAP "
        "and let raykueue's ClusterRole read that name (the chart's kueue.namespace and "
        "kueue.configMap values set both)"))


def _reinvoked(configs: list[Mapping[str, Any]], resource: str) -> bool:
    """Whether every webhook of ours after Kueue's that covers `resource` is IfNeeded."""
    group = "" if resource == "pods" else c.RAY_API_GROUP
    ours = [hook for cfg in configs if (cfg.get("metadata") or {}).get("name") == c.MUTATING_WEBHOOK_CONFIG
            for hook in cfg.get("webhooks") or [] if _covers(hook, group, resource)]
    return bool(ours) and all(hook.get("reinvocationPolicy") == "IfNeeded" for hook in ours)
