"""devstack's generated objects and configuration, without starting anything."""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal

from devstack import StackConfig, webhook_configurations
from devstack.components import kueue_config
from devstack.controlplane.objects import base_objects, node_objects
from devstack.controlplane.webhooks import shipped_webhook_configurations
from devstack.stack import Stack, components_for, free_ports, restart_component
from raykueue.core import contract


def test_webhook_configurations_follow_the_contract():
    configs = webhook_configurations("https://127.0.0.1:9443/", b"PEM")
    first, mutating, validating = configs[:3]
    assert [(c_["kind"].lower() + "s", c_["metadata"]["name"]) for c_ in (first, mutating, validating)] == \
        list(contract.WEBHOOK_CONFIGS)
    for config in configs:
        assert config["metadata"] == {"name": config["metadata"]["name"]}
    # The admission policies go as they ship, each with its Deny binding.
    policies = {p["metadata"]["name"] for p in configs if p["kind"] == "ValidatingAdmissionPolicy"}
    bound = {b["spec"]["policyName"] for b in configs if b["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert contract.STAMP_POLICY in policies and policies == bound
    assert len(configs) == 3 + 2 * len(policies)
    (m, last), (v,) = mutating["webhooks"], validating["webhooks"]
    assert m["clientConfig"] == {"url": "https://127.0.0.1:9443" + contract.MUTATE_PATH,
                                 "caBundle": base64.b64encode(b"PEM").decode()}
    assert v["clientConfig"]["url"] == "https://127.0.0.1:9443" + contract.VALIDATE_PATH
    for f in first["webhooks"]:
        assert f["clientConfig"]["url"] == "https://127.0.0.1:9443" + contract.RAY_OBJECTS_FIRST_PATH
    assert last["clientConfig"]["url"] == "https://127.0.0.1:9443" + contract.RAY_OBJECTS_LAST_PATH
    # the first stage sorts before Kueue's own configurations, the rest after
    assert first["metadata"]["name"] < "kueue-"
    assert all(c_["metadata"]["name"] > "kueue-" for c_ in (mutating, validating))


def test_webhook_configurations_are_the_shipped_ones_but_for_the_client_config():
    shipped = shipped_webhook_configurations()
    registered = webhook_configurations("https://127.0.0.1:1/", b"PEM")
    for ours, theirs in zip(registered, shipped, strict=True):
        if "webhooks" not in theirs:  # the ValidatingAdmissionPolicy and its binding
            assert {k: v for k, v in ours.items() if k != "metadata"} == {
                k: v for k, v in theirs.items() if k != "metadata"}
            continue
        for hook, shipped_hook in zip(ours["webhooks"], theirs["webhooks"], strict=True):
            assert "service" in shipped_hook["clientConfig"]
            rest = {k: v for k, v in hook.items() if k != "clientConfig"}
            assert rest == {k: v for k, v in shipped_hook.items() if k != "clientConfig"}
            assert hook["matchConditions"], "the CEL scope must reach the tests too"


def test_webhook_configuration_overrides():
    selector = {"matchLabels": {"team": "a"}}
    for config in webhook_configurations("https://x", "PEM", failure_policy="Ignore",
                                         timeout_seconds=2, namespace_selector=selector):
        if config["kind"] == "ValidatingAdmissionPolicy":
            assert config["spec"]["matchConstraints"]["namespaceSelector"] == selector
        for hook in config.get("webhooks", []):
            assert (hook["failurePolicy"], hook["timeoutSeconds"], hook["namespaceSelector"]) == (
                "Ignore", 2, selector)


def test_kueue_config_keeps_pod_and_ray_integrations_off(tmp_path):
    config = StackConfig(stack_dir=tmp_path, kueue_mode="minimal", kueue_config={"waitForPodsReady": {
        "timeout": "5m"}})
    cfg = kueue_config(config, health=1234, webhook=5678)
    assert cfg["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert cfg["integrations"]["frameworks"] == ["batch/job"]
    assert cfg["featureGates"]["VisibilityOnDemand"] is False
    assert cfg["internalCertManagement"] == {"enable": False}
    assert cfg["leaderElection"] == {"leaderElect": False}
    assert cfg["health"]["healthProbeBindAddress"] == "127.0.0.1:1234"
    assert cfg["webhook"]["port"] == 5678 and cfg["webhook"]["host"] == "127.0.0.1"
    assert cfg["metrics"]["bindAddress"] == "0"
    assert cfg["waitForPodsReady"] == {"timeout": "5m"}


def test_sample_objects_are_parameterized(tmp_path):
    config = StackConfig(stack_dir=tmp_path)
    config.samples.quota = {"cpu": "3"}
    config.nodes.count = 3
    by_kind = {}
    for o in base_objects(config):
        by_kind.setdefault(o["kind"], []).append(o)
    (cq,) = by_kind["ClusterQueue"]
    assert cq["spec"]["namespaceSelector"] == {}
    assert cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"] == [
        {"name": "cpu", "nominalQuota": "3"}]
    assert {w["metadata"]["name"]: w["value"] for w in by_kind["WorkloadPriorityClass"]} == {
        "ray-head": 1000, "ray-worker": 100}
    nodes = node_objects(config)
    assert len(nodes) == 3
    assert all(n["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake" for n in nodes)
    assert all("nvidia.com/gpu" in n["status"]["allocatable"] for n in nodes)


def test_tiers_and_ports():
    assert components_for("api") == ["etcd", "kube-apiserver", "kube-controller-manager"]
    assert set(components_for("e2e")) >= {"kueue", "ray-operator", "kwok", "kube-scheduler"}
    ports = free_ports(5)
    assert len(set(ports)) == 5


def test_kueue_pod_integration_overlay_turns_pod_on_only_in_selected_namespaces(tmp_path):
    from bench.kueue_pods import kueue_pod_integration

    selector = {"matchLabels": {"bench.raykueue.io/system": "kueue"}}
    cfg = kueue_config(StackConfig(stack_dir=tmp_path, kueue_mode="minimal",
                                   kueue_config=kueue_pod_integration(selector)), health=1, webhook=2)
    assert cfg["integrations"]["frameworks"] == ["batch/job", "pod"]
    assert cfg["managedJobsNamespaceSelector"] == selector
    # minimal without the overlay stays pod-free
    assert "managedJobsNamespaceSelector" not in kueue_config(
        StackConfig(stack_dir=tmp_path, kueue_mode="minimal"), 1, 2)


def test_restart_through_a_stale_stack_object_keeps_the_other_components(tmp_path) -> None:
    """The `Stack` that `up("api")` returned does not know what `up("e2e")` added
    later; restarting through it once dropped those from state.json, and `down`
    then left them running. Two `sleep`s stand in for components."""
    sleep = shutil.which("sleep")
    assert sleep is not None
    config = StackConfig(stack_dir=tmp_path / "stack", bin_dir=tmp_path / "bin")
    config.stack_dir.mkdir()
    full = Stack(config)
    full.spawn("kube-scheduler", [sleep, "300"], {})
    stale = Stack.load(config)
    assert stale is not None and set(stale.procs) == {"kube-scheduler"}
    full.spawn("kwok", [sleep, "301"], {})  # added after `stale` was read
    old_pid = full.procs["kube-scheduler"].pid
    try:
        restart_component(stale, "kube-scheduler", grace=5)
        recorded = Stack.load(config)
        assert recorded is not None
        assert set(recorded.procs) == {"kube-scheduler", "kwok"}
        assert recorded.procs["kube-scheduler"].pid != old_pid
        assert recorded.procs["kwok"].alive()
        assert stale.procs["kube-scheduler"].pid == recorded.procs["kube-scheduler"].pid
    finally:
        every = [*full.procs.values(), *stale.procs.values(),
                 *((Stack.load(config) or full).procs.values())]
        for pid in {proc.pid for proc in every}:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)


def test_plan_starts_what_is_needed_first_and_stops_in_reverse() -> None:
    from devstack.components import COMPONENTS
    from devstack.plan import STEPS, start_order, stop_order, waves

    for tier in ("api", "e2e"):
        seen: set[str] = set()
        for wave in waves(tier):
            for name in wave:
                needs = (COMPONENTS.get(name) or STEPS[name]).needs
                assert set(needs) <= seen, (name, needs)
            seen.update(wave)
    assert waves("api") == [["etcd"], ["kube-apiserver"], ["kube-controller-manager", "objects"]]
    assert waves("e2e")[0] == ["etcd", "dashboard-proxy"]
    assert waves("e2e")[-1] == ["kube-scheduler", "kwok", "kueue", "ray-operator"]
    assert start_order("api") == components_for("api")
    # Dependents stop before what they depend on; names no declaration knows go first.
    assert stop_order([*components_for("e2e"), "stray"]) == [
        "stray", "ray-operator", "kueue", "kwok", "kube-scheduler", "kube-controller-manager",
        "kube-apiserver", "dashboard-proxy", "etcd"]


def test_every_handle_reads_state_json_afresh(tmp_path) -> None:
    config = StackConfig(stack_dir=tmp_path)
    first, second = Stack(config), Stack(config)
    first.record(tier="api", owner="session")
    assert (second.tier, second.owner) == ("api", "session")
    assert Stack.load(StackConfig(stack_dir=tmp_path / "none")) is None
