"""devstack/kueue/shipped.py: Kueue's shipped Configuration, webhooks and APIService for the stack.

Its rules on made-up inputs; what it makes of the Kueue module controlplane/go.mod
pins (from the Go module cache) is tested in the tools tier:
tests/tools/test_kueue_module.py.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from devstack.config import KUEUE_MODE_ENV, StackConfig
from devstack.controlplane.objects import KUEUE_NAMESPACE
from devstack.kueue import shipped as ks
from devstack.stack import Stack, StackError, _other_mode

NOT_SYSTEM = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                    "values": ["kube-system", "kueue-system"]}]}


def _hook(name: str, path: str) -> dict:
    return {"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": {"service": {"name": "webhook-service", "namespace": "system",
                                         "path": path}}}


def _manifests() -> list[dict]:
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
         "metadata": {"name": "mutating-webhook-configuration"},
         "webhooks": [_hook("mjob.kb.io", "/mutate-job"), _hook("mworkload.kb.io", "/mutate-wl")]},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
         "metadata": {"name": "validating-webhook-configuration"},
         "webhooks": [_hook("vjob.kb.io", "/validate-job"), _hook("vpod.kb.io", "/validate-pod")]},
    ]


def _kustomization(create: bool = True) -> dict:
    patch = {"apiVersion": "admissionregistration.k8s.io/v1",
             "kind": "ValidatingWebhookConfiguration",
             "metadata": {"name": "validating-webhook-configuration"},
             "webhooks": [{"name": "vpod.kb.io", "namespaceSelector": NOT_SYSTEM}]}
    return {
        "resources": ["manifests.yaml"],
        "patches": [{"patch": yaml.safe_dump(patch)}],
        "replacements": [{
            "source": {"kind": "ValidatingWebhookConfiguration",
                       "name": "validating-webhook-configuration",
                       "fieldPath": "webhooks.[name=vpod.kb.io].namespaceSelector"},
            "targets": [
                {"select": {"kind": "MutatingWebhookConfiguration",
                            "name": "mutating-webhook-configuration"},
                 "fieldPaths": ["webhooks.[name=mjob.kb.io].namespaceSelector"],
                 "options": {"create": create}},
                {"select": {"kind": "ValidatingWebhookConfiguration",
                            "name": "validating-webhook-configuration"},
                 "fieldPaths": ["webhooks.[name=vjob.kb.io].namespaceSelector"],
                 "options": {"create": create}},
            ],
        }],
    }


# ---- the module -------------------------------------------------------------------------

def test_pinned_version_reads_require_lines_and_prefers_a_replace() -> None:
    go_mod = "module x\n\nrequire (\n\tsigs.k8s.io/kueue v0.19.2\n\tsigs.k8s.io/kwok v0.8.0\n)\n"
    assert ks.pinned_version(go_mod) == "v0.19.2"
    assert ks.pinned_version("require sigs.k8s.io/kueue v0.20.0\n") == "v0.20.0"
    replaced = go_mod + "replace sigs.k8s.io/kueue => sigs.k8s.io/kueue v0.19.3\n"
    assert ks.pinned_version(replaced) == "v0.19.3"
    with pytest.raises(ValueError, match="does not require"):
        ks.pinned_version("require sigs.k8s.io/kueue-extra v1.0.0\n")


def test_module_cache_paths_escape_upper_case() -> None:
    assert ks.escape_module_path("github.com/Azure/go-ansiterm") == "github.com/!azure/go-ansiterm"
    assert ks.escape_module_path("sigs.k8s.io/kueue") == "sigs.k8s.io/kueue"


def test_module_cache_honours_gomodcache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GOMODCACHE", str(tmp_path))
    assert ks.module_cache() == tmp_path


# ---- webhook configurations ---------------------------------------------------------------

def test_kustomized_webhooks_apply_the_patch_replacements_and_prefix() -> None:
    mutating, validating = ks.kustomized_webhooks(_manifests(), _kustomization(), "kueue-")
    assert mutating["metadata"]["name"] == "kueue-mutating-webhook-configuration"
    assert validating["metadata"]["name"] == "kueue-validating-webhook-configuration"
    selectors = {h["name"]: h.get("namespaceSelector")
                 for c in (mutating, validating) for h in c["webhooks"]}
    assert selectors == {"mjob.kb.io": NOT_SYSTEM, "mworkload.kb.io": None,
                         "vjob.kb.io": NOT_SYSTEM, "vpod.kb.io": NOT_SYSTEM}
    # each webhook holds its own copy
    mutating["webhooks"][0]["namespaceSelector"]["matchExpressions"].clear()
    assert validating["webhooks"][0]["namespaceSelector"] == NOT_SYSTEM


def test_kustomized_webhooks_without_create_leave_absent_fields_absent() -> None:
    mutating, _ = ks.kustomized_webhooks(_manifests(), _kustomization(create=False), "")
    assert "namespaceSelector" not in mutating["webhooks"][0]


@pytest.mark.parametrize("breakage", ["file patch", "unknown webhook", "other field path"])
def test_kustomized_webhooks_refuse_what_they_do_not_understand(breakage: str) -> None:
    k = _kustomization()
    if breakage == "file patch":
        k["patches"] = [{"path": "webhook_patch.yaml"}]
    elif breakage == "unknown webhook":
        k["replacements"][0]["targets"][0]["fieldPaths"] = ["webhooks.[name=mnew.kb.io].namespaceSelector"]
    else:
        k["replacements"][0]["targets"][0]["fieldPaths"] = ["metadata.labels"]
    with pytest.raises(ValueError):
        ks.kustomized_webhooks(_manifests(), k, "kueue-")


def test_kueue_webhook_configurations_are_registered_by_url() -> None:
    shipped = ks.kustomized_webhooks(_manifests(), _kustomization(), "kueue-")
    mutating, validating = ks.kueue_webhook_configurations(shipped, "https://127.0.0.1:7000/", b"CA")
    assert mutating["webhooks"][0]["clientConfig"] == {
        "url": "https://127.0.0.1:7000/mutate-job", "caBundle": base64.b64encode(b"CA").decode()}
    assert all("service" not in h["clientConfig"] for c in (mutating, validating)
               for h in c["webhooks"])
    assert "service" in shipped[0]["webhooks"][0]["clientConfig"], "the input is left alone"


def test_kueue_webhook_configurations_can_keep_some_hooks_for_some_namespaces() -> None:
    shipped = ks.kustomized_webhooks(_manifests(), _kustomization(), "kueue-")
    selector = {"matchLabels": {"team": "x"}}
    (validating,) = ks.kueue_webhook_configurations(shipped, "https://k", b"CA",
                                                    only=["vpod.kb.io"], namespace_selector=selector)
    assert [h["name"] for h in validating["webhooks"]] == ["vpod.kb.io"]
    assert validating["webhooks"][0]["namespaceSelector"] == selector


# ---- Kueue's Configuration --------------------------------------------------------------------

def _listen(visibility: int | None = 3) -> ks.Listeners:
    return ks.Listeners(health=1, webhook=2, webhook_cert_dir=Path("/certs"), visibility=visibility)


def test_minimal_configuration_and_the_overlay() -> None:
    overlay = {"waitForPodsReady": {"timeout": "5m"}, "integrations": {"frameworks": ["pod"]}}
    cfg = ks.kueue_configuration(ks.MINIMAL_BASE, KUEUE_NAMESPACE, _listen(None), overlay)
    assert cfg["featureGates"] == {"VisibilityOnDemand": False}
    assert "visibilityServer" not in cfg
    assert cfg["waitForPodsReady"] == {"timeout": "5m"}
    assert cfg["integrations"]["frameworks"] == ["pod"], "the overlay comes last"
    assert ks.MINIMAL_BASE["integrations"]["frameworks"] == ["batch/job"], "base left alone"


# ---- the aggregation layer -------------------------------------------------------------------

def test_aggregation_pki_and_flags(tmp_path: Path) -> None:
    ca, client = ks.ensure_aggregation_pki(tmp_path)
    flags = dict(f.removeprefix("--").split("=", 1) for f in ks.apiserver_aggregation_flags(ca, client))
    assert flags["requestheader-client-ca-file"] == str(ca.cert)
    assert (flags["proxy-client-cert-file"], flags["proxy-client-key-file"]) == (
        str(client.cert), str(client.key))
    cert = x509.load_pem_x509_certificate(client.cert.read_bytes())
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    cert.verify_directly_issued_by(ca_cert)
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    assert flags["requestheader-allowed-names"] == cn
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in eku
    # a second call keeps the pair the running API server already has
    assert ks.ensure_aggregation_pki(tmp_path)[1].cert.read_bytes() == client.cert.read_bytes()


# ---- the mode of a stack ---------------------------------------------------------------------

def test_mode_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KUEUE_MODE_ENV, raising=False)
    assert StackConfig().kueue_mode == "shipped"  # Kueue as users install it, by default
    monkeypatch.setenv(KUEUE_MODE_ENV, "minimal")
    assert StackConfig().kueue_mode == "minimal"
    monkeypatch.setenv(KUEUE_MODE_ENV, "full")
    with pytest.raises(ValueError, match=KUEUE_MODE_ENV):
        StackConfig()


def test_mode_is_recorded_in_the_state(tmp_path: Path) -> None:
    Stack(StackConfig(stack_dir=tmp_path, kueue_mode="shipped")).record()
    loaded = Stack.load(StackConfig(stack_dir=tmp_path, kueue_mode="minimal"))
    assert loaded is not None and loaded.kueue_mode == "shipped"
    state = json.loads((tmp_path / "state.json").read_text())
    del state["kueue_mode"]  # written before there were modes
    (tmp_path / "state.json").write_text(json.dumps(state))
    old = Stack.load(StackConfig(stack_dir=tmp_path, kueue_mode="shipped"))
    assert old is not None and old.kueue_mode == "minimal"


def test_a_stack_of_the_other_mode_goes_only_when_no_one_else_uses_it(tmp_path: Path) -> None:
    stack = Stack(StackConfig(stack_dir=tmp_path, kueue_mode="minimal"))
    logged: list[str] = []
    stack.record(owner="manual")
    with pytest.raises(StackError, match="started by hand"):
        _other_mode(stack, "shipped", None, logged.append)
    stack.record(owner="session")
    users = tmp_path / "users"
    users.mkdir()
    (users / str(os.getppid())).touch()  # a live process: another session
    with pytest.raises(StackError, match=r"'minimal' but 'shipped' was asked"):
        _other_mode(stack, "shipped", os.getpid(), logged.append)
    (users / str(os.getppid())).unlink()
    (users / str(os.getpid())).touch()  # only the asking session itself
    _other_mode(stack, "shipped", os.getpid(), logged.append)
    assert logged and "restarting" in logged[0]


# ---- facts of a Kueue module ----------------------------------------------------------------

GATES = """var defaultVersionedFeatureGates = map[featuregate.Feature]featuregate.VersionedSpecs{
\tElasticJobsViaWorkloadSlices: {
\t\t{Version: version.MustParse("0.13"), Default: false, PreRelease: featuregate.Alpha},
\t\t{Version: version.MustParse("0.18"), Default: true, PreRelease: featuregate.Beta},
\t},
\tWorkloadPriorityClassDefaulting: {
\t\t{Version: version.MustParse("0.18"), Default: false, PreRelease: featuregate.Alpha},
\t},
}
"""


def test_a_feature_gate_defaults_as_its_last_spec_says(tmp_path: Path) -> None:
    (tmp_path / "pkg/features").mkdir(parents=True)
    (tmp_path / ks.FEATURES_GO).write_text(GATES)
    assert ks.feature_gate_default(tmp_path, "ElasticJobsViaWorkloadSlices") is True
    assert ks.feature_gate_default(tmp_path, "WorkloadPriorityClassDefaulting") is False
    assert ks.feature_gate_default(tmp_path, "NoSuchGate") is None


def test_sources_mention_skips_tests(tmp_path: Path) -> None:
    (tmp_path / "pkg/a").mkdir(parents=True)
    (tmp_path / "pkg/a/a_test.go").write_text('const k = "kueue.x-k8s.io/elastic-job-scale-up-strategy"\n')
    assert not ks.sources_mention(tmp_path, "kueue.x-k8s.io/elastic-job-scale-up-strategy")
    (tmp_path / "pkg/a/a.go").write_text('const k = "kueue.x-k8s.io/elastic-job-scale-up-strategy"\n')
    assert ks.sources_mention(tmp_path, "kueue.x-k8s.io/elastic-job-scale-up-strategy")


def test_a_kueue_without_a_visibility_server_setting_runs_without_its_visibility_api(tmp_path: Path) -> None:
    """Kueue before v0.16 binds its visibility server to 0.0.0.0:8082 with no setting to move it."""
    types = tmp_path / "apis/config/v1beta2/configuration_types.go"
    types.parent.mkdir(parents=True)
    (tmp_path / "pkg/features").mkdir(parents=True)
    (tmp_path / ks.FEATURES_GO).write_text(
        "\tVisibilityOnDemand: {\n\t\t{Version: version.MustParse(\"0.9\"), Default: true},\n\t},\n")
    health = "\tHealth ControllerHealth `json:\"health,omitempty\"`\n"
    types.write_text("type Configuration struct {\n" + health + "}\n")
    old = ks.KueueModule(tmp_path)
    assert not old.visibility_placeable and not old.serves_visibility
    visibility = "\tVisibilityServer *VisibilityServerConfiguration `json:\"visibilityServer,omitempty\"`\n"
    types.write_text("type Configuration struct {\n" + health + visibility + "}\n")
    assert ks.KueueModule(tmp_path).serves_visibility
    assert ks.NO_VISIBILITY == {"featureGates": {"VisibilityOnDemand": False}}


def test_kueues_crds_convert_through_its_webhook_by_url() -> None:
    """As config/components/crd patches them (a conversion webhook naming Kueue's Service),
    here by URL to the stack's Kueue. What the pinned module's patches make of it is in
    tests/tools/test_kueue_module.py."""
    patch = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
             "metadata": {"name": "workloads.kueue.x-k8s.io"},
             "spec": {"conversion": {"strategy": "Webhook", "webhook": {
                 "clientConfig": {"service": {"namespace": "system", "name": "webhook-service",
                                              "path": "/convert"}},
                 "conversionReviewVersions": ["v1"]}}}}
    (workloads,) = ks.conversion_objects([patch], "https://127.0.0.1:9443/", b"PEM")
    assert workloads["metadata"] == {"name": "workloads.kueue.x-k8s.io"}
    assert workloads["spec"] == {"conversion": {"strategy": "Webhook", "webhook": {
        "clientConfig": {"url": "https://127.0.0.1:9443/convert",
                         "caBundle": base64.b64encode(b"PEM").decode()},
        "conversionReviewVersions": ["v1"]}}}
