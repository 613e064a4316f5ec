"""Reading Kueue's setup and judging it: what would let Kueue take an opted-in cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from raykueue.coexist.findings import KINDS, findings, unread
from raykueue.coexist.kueueconfig import (
    ASSUMED,
    SHIPPED_FRAMEWORKS,
    BadConfig,
    parse,
    read_configuration,
    writes_pods_ready,
)
from raykueue.core import contract as c
from raykueue.core.selectors import matches

MANIFESTS = Path(__file__).resolve().parents[3] / "manifests"


def kueue_config(**fields) -> str:
    return yaml.safe_dump({"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
                           **fields})


def test_kueue_as_shipped_has_its_ray_and_pod_integrations_and_waits_for_pods_ready() -> None:
    setup = parse(kueue_config(integrations={"frameworks": list(SHIPPED_FRAMEWORKS)}), "cm")
    assert setup.ray_kinds == {"RayCluster", "RayJob", "RayService"} and setup.pod_integration
    assert setup.wait_for_pods_ready and not setup.manage_jobs_without_queue_name
    assert not setup.manages_unqueued_in(ns("team-a"))
    assert ASSUMED.ray_kinds == setup.ray_kinds and ASSUMED.wait_for_pods_ready


def test_wait_for_pods_ready_follows_the_api_version_and_the_feature_gate() -> None:
    assert not parse(kueue_config(featureGates={"DisableWaitForPodsReady": True}), "cm").wait_for_pods_ready
    v1beta1 = {"apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration"}
    assert not parse(yaml.safe_dump(v1beta1), "cm").wait_for_pods_ready
    on = {**v1beta1, "waitForPodsReady": {"enable": True}}
    assert parse(yaml.safe_dump(on), "cm").wait_for_pods_ready


def test_pods_ready_is_written_as_forced_else_as_kueue_reads_it_else_yes() -> None:
    off = parse(kueue_config(featureGates={"DisableWaitForPodsReady": True}), "cm")
    asked: list[str] = []

    def reader(setup):
        def read():
            asked.append("read")
            return setup
        return read

    assert writes_pods_ready("true", reader(off)) and not writes_pods_ready("false", reader(ASSUMED))
    assert not asked, "a forced setting never waits for Kueue's setup"
    assert not writes_pods_ready("auto", reader(off))
    assert writes_pods_ready("auto", reader(ASSUMED))
    assert writes_pods_ready("auto", reader(None)), "not read yet: a needless write beats an eviction"


def ns(name: str, **labels: str) -> dict[str, str]:
    """A namespace's labels, as the API server gives every namespace its name label."""
    return {"kubernetes.io/metadata.name": name, **labels}


def test_manage_jobs_without_queue_name_applies_in_the_selected_namespaces_only() -> None:
    setup = parse(kueue_config(manageJobsWithoutQueueName=True), "cm")
    assert setup.manages_unqueued_in(ns("team-a"))
    assert not setup.manages_unqueued_in(ns("kueue-system"))
    narrowed = parse(kueue_config(manageJobsWithoutQueueName=True, managedJobsNamespaceSelector={
        "matchLabels": {"kubernetes.io/metadata.name": "batch"}}), "cm")
    assert narrowed.manages_unqueued_in(ns("batch")) and not narrowed.manages_unqueued_in(ns("team-a"))


def test_namespaces_are_judged_by_their_labels() -> None:
    """Kueue's documented selector is a label (`kueue-managed=true`), not a name."""
    setup = parse(kueue_config(manageJobsWithoutQueueName=True, managedJobsNamespaceSelector={
        "matchLabels": {"kueue-managed": "true"}}), "cm")
    assert setup.manages_unqueued_in(ns("team-a", **{"kueue-managed": "true"}))
    assert not setup.manages_unqueued_in(ns("team-a"))


@pytest.mark.parametrize("text", ["{", "kind: Deployment", "[]"])
def test_what_is_not_a_kueue_configuration_is_refused_with_its_source(text: str) -> None:
    with pytest.raises(BadConfig, match="kueue-system/kueue-manager-config"):
        parse(text, "kueue-system/kueue-manager-config")


def test_selectors_as_kubernetes_reads_them() -> None:
    labels = {"a": "1", "b": "2"}
    assert matches(None, labels) and matches({}, labels)
    assert matches({"matchLabels": {"a": "1"}}, labels) and not matches({"matchLabels": {"a": "2"}}, labels)
    for op, values, want in (("In", ["1"], True), ("NotIn", ["1"], False), ("Exists", [], True),
                             ("DoesNotExist", [], False), ("Bogus", [], False)):
        assert matches({"matchExpressions": [{"key": "a", "operator": op, "values": values}]}, labels) is want


def ours() -> list[dict]:
    return [d for d in yaml.safe_load_all((MANIFESTS / "webhooks.yaml").read_text())
            if d["kind"] == "MutatingWebhookConfiguration"]


def kueues(name: str = "kueue-mutating-webhook-configuration", reinvocation: str | None = None) -> dict:
    pod = {"name": "mpod.kb.io", "rules": [{"apiGroups": [""], "resources": ["pods"]}]}
    ray = {"name": "mraycluster.kb.io", "rules": [{"apiGroups": ["ray.io"], "resources": ["rayclusters"]}]}
    if reinvocation:
        pod["reinvocationPolicy"] = ray["reinvocationPolicy"] = reinvocation
    return {"metadata": {"name": name}, "webhooks": [pod, ray]}


def test_a_safe_setup_has_no_findings() -> None:
    assert findings(ASSUMED, [*ours(), kueues()]) == []


def test_each_unsafe_setup_is_found_and_says_what_to_change() -> None:
    unqueued = parse(kueue_config(manageJobsWithoutQueueName=True,
                                  integrations={"frameworks": ["ray.io/raycluster"]}), "cm")
    (f,) = findings(unqueued, [*ours(), kueues()])
    assert f.kind == "KueueManagesJobsWithoutQueue" and "namespaces" in f.message

    missing = findings(ASSUMED, [kueues()])
    assert {f.kind for f in missing} == {"RaykueueWebhookMissing"} and len(missing) == 2
    assert all("manifests/webhooks.yaml" in f.message for f in missing)

    (order,) = findings(ASSUMED, [*ours(), kueues(name="00-kueue")])
    assert order.kind == "WebhookOrder" and c.FIRST_MUTATING_WEBHOOK_CONFIG in order.message

    # Kueue's webhooks reinvoked: safe while ours after them are IfNeeded too (the
    # API server then reinvokes ours after Kueue's), found when one of ours is not.
    assert findings(ASSUMED, [*ours(), kueues(reinvocation="IfNeeded")]) == []
    never = ours()
    for cfg in never:
        for hook in cfg["webhooks"]:
            hook["reinvocationPolicy"] = "Never"
    found = findings(ASSUMED, [*never, kueues(reinvocation="IfNeeded")])
    assert {f.kind for f in found} == {"KueueWebhookReinvoked"} and len(found) == 2
    assert all("IfNeeded" in f.message for f in found)


def test_without_kueues_ray_integrations_our_webhooks_are_not_required() -> None:
    setup = parse(kueue_config(integrations={"frameworks": ["batch/job", "pod"]}), "cm")
    assert findings(setup, []) == []


@pytest.mark.parametrize("config_map, error, problem", [
    (None, None, "not found"),
    (None, "403 Forbidden: configmaps is forbidden", "not readable: 403 Forbidden"),
    ({"data": {}}, None, "has no key controller_manager_config.yaml"),
    ({"data": {"controller_manager_config.yaml": "kind: Deployment"}}, None, "not a Kueue Configuration"),
], ids=["absent", "forbidden", "no-key", "not-a-configuration"])
def test_a_configuration_not_read_says_why_and_assumes_kueue_as_shipped(
        config_map: dict | None, error: str | None, problem: str) -> None:
    setup, why = read_configuration(config_map, "ConfigMap q/queues-kueue-manager-config", error)
    assert setup is ASSUMED and why is not None and problem in why
    finding = unread("ConfigMap q/queues-kueue-manager-config", why)
    assert finding.kind == "KueueConfigurationUnread" and finding.kind in KINDS
    # Where it looked, what it assumes instead, and the two settings that name it.
    for part in ("q/queues-kueue-manager-config", problem, "assumes Kueue as shipped",
                 "RAYKUEUE_KUEUE_NAMESPACE", "RAYKUEUE_KUEUE_CONFIG_MAP", "kueue.configMap"):
        assert part in finding.message


def test_a_configuration_read_has_no_problem() -> None:
    setup, why = read_configuration({"data": {"controller_manager_config.yaml": kueue_config(
        manageJobsWithoutQueueName=True)}}, "ConfigMap kueue-system/kueue-manager-config")
    assert why is None and setup.manage_jobs_without_queue_name
