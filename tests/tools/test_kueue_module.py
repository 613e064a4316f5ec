"""The Kueue module controlplane/go.mod pins, as the stack takes its setup from it.

devstack/kueue/shipped.py reads Kueue's shipped Configuration, webhooks and
APIService from the Go module cache, where controlplane/build.sh downloads the
module; the tests of what it makes of them are here, in the tier that
provides the build's output (a missing module fails, never skips). Its rules
on made-up inputs are unit tests: tests/unit/stack/test_devstack_kueue_shipped.py.
"""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from bench.kueue_pods import kueue_pod_webhook_configurations
from devstack.components import kueue_config
from devstack.config import StackConfig
from devstack.controlplane.objects import KUEUE_NAMESPACE
from devstack.kueue import shipped as ks
from raykueue.coexist.kueueconfig import parse
from raykueue.core import contract

NOT_SYSTEM = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                    "values": ["kube-system", "kueue-system"]}]}


def _listen(visibility: int | None = 3) -> ks.Listeners:
    return ks.Listeners(health=1, webhook=2, webhook_cert_dir=Path("/certs"), visibility=visibility)


def test_the_module_is_the_version_controlplane_pins(kueue_module: ks.KueueModule) -> None:
    version = ks.pinned_version(ks.GO_MOD.read_text())
    assert kueue_module.root.name == f"kueue@{version}"


def test_shipped_webhooks_cover_every_job_and_pod_webhook_of_the_module(
        kueue_module: ks.KueueModule) -> None:
    module = kueue_module
    configs = ks.kueue_webhook_configurations(module.webhook_configurations(), "https://k", b"CA")
    assert [c["metadata"]["name"] for c in configs] == [
        "kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration"]
    # Kueue's configurations sort (and so are called) before raykueue's
    assert all(c["metadata"]["name"] < contract.MUTATING_WEBHOOK_CONFIG for c in configs)
    hooks = {h["name"]: h for c in configs for h in c["webhooks"]}
    for name in ("mpod.kb.io", "vpod.kb.io", "mraycluster.kb.io", "vraycluster.kb.io",
                 "mrayjob.kb.io", "mrayservice.kb.io", "mjob.kb.io", "vjob.kb.io"):
        assert hooks[name]["namespaceSelector"] == NOT_SYSTEM, name
    # Kueue's own objects are not namespaced: no selector
    assert "namespaceSelector" not in hooks["vworkload.kb.io"]
    assert hooks["mraycluster.kb.io"]["clientConfig"]["url"] == "https://k/mutate-ray-io-v1-raycluster"


def test_pod_webhooks_for_the_benchmarks_are_the_shipped_pod_webhooks(
        kueue_module: ks.KueueModule) -> None:
    mutating, validating = kueue_pod_webhook_configurations("https://k", b"CA",
                                                            {"matchLabels": {"a": "b"}})
    shipped = {h["name"]: h for c in kueue_module.webhook_configurations()
               for h in c["webhooks"]}
    for config in (mutating, validating):
        (hook,) = config["webhooks"]
        assert hook["rules"] == shipped[hook["name"]]["rules"]
        assert hook["namespaceSelector"] == {"matchLabels": {"a": "b"}}


def test_shipped_configuration_keeps_the_module_s_frameworks_and_moves_listeners(
        kueue_module: ks.KueueModule) -> None:
    module = kueue_module
    raw = yaml.safe_load((module.root / ks.MANAGER_CONFIG).read_text())
    cfg = ks.kueue_configuration(module.manager_config, KUEUE_NAMESPACE, _listen())
    assert cfg["integrations"]["frameworks"] == raw["integrations"]["frameworks"]
    assert {"pod", "ray.io/raycluster", "ray.io/rayjob", "ray.io/rayservice"} <= set(
        cfg["integrations"]["frameworks"])
    assert cfg["controller"] == raw["controller"]
    assert cfg["clientConnection"] == raw["clientConnection"]
    # VisibilityOnDemand and the rest keep Kueue's defaults
    assert "featureGates" not in cfg
    assert "manageJobsWithoutQueueName" not in cfg
    assert cfg["leaderElection"] == {"leaderElect": False}
    assert cfg["internalCertManagement"] == {"enable": False}
    assert cfg["health"]["healthProbeBindAddress"] == "127.0.0.1:1"
    assert cfg["webhook"] == {"host": "127.0.0.1", "port": 2, "certDir": "/certs"}
    assert cfg["visibilityServer"] == {"bindAddress": "127.0.0.1", "bindPort": 3}
    assert cfg["namespace"] == module.namespace == KUEUE_NAMESPACE


def test_stack_picks_the_configuration_of_its_mode(kueue_module: ks.KueueModule,
                                                  tmp_path: Path) -> None:
    shipped = kueue_config(StackConfig(stack_dir=tmp_path, kueue_mode="shipped"), 1, 2, 3)
    minimal = kueue_config(StackConfig(stack_dir=tmp_path, kueue_mode="minimal"), 1, 2, 3)
    assert "ray.io/raycluster" in shipped["integrations"]["frameworks"]
    assert shipped["visibilityServer"]["bindPort"] == 3
    assert minimal["integrations"]["frameworks"] == ["batch/job"]
    assert "visibilityServer" not in minimal


def test_visibility_objects_route_the_shipped_apiservice_to_loopback(
        kueue_module: ks.KueueModule) -> None:
    module = kueue_module
    shipped = module.doc(ks.VISIBILITY_APISERVICE)
    svc, apisvc = ks.visibility_objects(shipped, module.doc(ks.VISIBILITY_SERVICE),
                                        module.namespace, 8123)
    assert svc["spec"] == {"type": "ExternalName", "externalName": "localhost"}
    assert svc["metadata"]["namespace"] == KUEUE_NAMESPACE
    assert apisvc["metadata"] == {"name": "v1beta2.visibility.kueue.x-k8s.io"}
    assert apisvc["spec"]["service"] == {"name": svc["metadata"]["name"],
                                         "namespace": KUEUE_NAMESPACE, "port": 8123}
    for key in ("group", "version", "groupPriorityMinimum", "versionPriority",
                "insecureSkipTLSVerify"):
        assert apisvc["spec"][key] == shipped["spec"][key], key


def test_the_stack_publishes_kueues_configuration_as_installs_do(
        kueue_module: ks.KueueModule) -> None:
    """raykueue reads Kueue's setup from this ConfigMap (coexist/); the stack's must parse as shipped."""
    text = yaml.safe_dump(kueue_module.manager_config)
    cm = ks.manager_config_map(text, "kueue-system")
    assert (cm["metadata"]["name"], cm["metadata"]["namespace"]) == ("kueue-manager-config", "kueue-system")
    setup = parse(cm["data"]["controller_manager_config.yaml"], "stack")
    assert setup.ray_kinds == {"RayCluster", "RayJob", "RayService"} and setup.pod_integration
    assert setup.wait_for_pods_ready


def test_kueue_pod_webhooks_match_what_kueue_ships(kueue_module: ks.KueueModule) -> None:
    selector = {"matchLabels": {"team": "x"}}
    mutating, validating = kueue_pod_webhook_configurations("https://127.0.0.1:7000/", b"CA", selector)
    (m,), (v,) = mutating["webhooks"], validating["webhooks"]
    assert (m["name"], m["clientConfig"]["url"]) == ("mpod.kb.io", "https://127.0.0.1:7000/mutate--v1-pod")
    assert (v["name"], v["clientConfig"]["url"]) == ("vpod.kb.io",
                                                     "https://127.0.0.1:7000/validate--v1-pod")
    assert m["rules"][0]["operations"] == ["CREATE"]
    assert v["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert base64.b64decode(v["clientConfig"]["caBundle"]) == b"CA"
    assert m["namespaceSelector"] == v["namespaceSelector"] == selector
    selector["matchLabels"]["team"] = "changed"  # the configurations hold their own copy
    assert m["namespaceSelector"] == {"matchLabels": {"team": "x"}}
    # Kueue's configurations sort before raykueue's
    assert all(c["metadata"]["name"] < contract.MUTATING_WEBHOOK_CONFIG for c in (mutating, validating))


def test_the_pinned_kueue_ships_elastic_jobs_on_and_no_partial_scale_up(
        kueue_module: ks.KueueModule) -> None:
    """What bench/elastic.py says of the pinned Kueue (v0.19.2: the gate Beta, on since 0.18;
    the partial scale-up strategy came after it). A new pin makes this say what changed."""
    assert ks.feature_gate_default(kueue_module.root, "ElasticJobsViaWorkloadSlices") is True
    assert not ks.sources_mention(kueue_module.root,
                                  "kueue.x-k8s.io/elastic-job-scale-up-strategy")


def test_the_pinned_kueues_crds_convert_through_its_webhook(kueue_module: ks.KueueModule) -> None:
    """config/components/crd's patches name a conversion webhook for Workloads and both
    queues; the stack sends each to its Kueue by URL."""
    patches = kueue_module.conversion_patches()
    assert {"workloads.kueue.x-k8s.io", "clusterqueues.kueue.x-k8s.io",
            "localqueues.kueue.x-k8s.io"} <= {p["metadata"]["name"] for p in patches}
    (workloads,) = [o for o in ks.conversion_objects(patches, "https://127.0.0.1:9443/", b"PEM")
                    if o["metadata"]["name"] == "workloads.kueue.x-k8s.io"]
    hook = workloads["spec"]["conversion"]["webhook"]
    assert hook["clientConfig"] == {"url": "https://127.0.0.1:9443/convert",
                                    "caBundle": base64.b64encode(b"PEM").decode()}
