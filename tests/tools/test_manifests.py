"""manifests/ agrees with the names the code uses.

The install and the code spell the same names in two languages; these checks
keep a rename in one from silently breaking the other. kustomize is the
control plane's kubectl (controlplane/build.sh): the tools tier, where a
missing one fails.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from devstack.config import default_bin_dir
from raykueue.app.settings import Settings
from raykueue.core import contract as c
from raykueue.webhooks.autoscaler_env import ALLOCATE_TIMEOUT_ENV
from testkit.podenv import kubelet_env, settings_from
from testkit.tools.versions import wheel_version

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
PRIORITIES = MANIFESTS / "components" / "priorities"
CERT_MANAGER = ROOT / "examples" / "cert-manager"
EXAMPLES = ROOT / "examples"
NAMESPACE = "raykueue-system"
SERVICE_DNS = [f"raykueue-webhook.{NAMESPACE}.svc", f"raykueue-webhook.{NAMESPACE}.svc.cluster.local"]


def _kubectl() -> str:
    kubectl = default_bin_dir() / "kubectl"
    if not kubectl.exists():
        pytest.fail(f"{kubectl} is missing; run controlplane/build.sh")
    return str(kubectl)


def by_name(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def build(path: Path) -> list[dict[str, Any]]:
    out = subprocess.run([_kubectl(), "kustomize", str(path)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="module")
def objs() -> dict[tuple[str, str], dict[str, Any]]:
    return by_name(build(MANIFESTS))


def container(objs: dict) -> dict[str, Any]:
    return objs[("Deployment", "raykueue")]["spec"]["template"]["spec"]["containers"][0]


def env(objs: dict) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(objs)["env"]}


def granted_to(objs: dict, account: str = "raykueue") -> list[dict[str, Any]]:
    """Every rule of every Role and ClusterRole bound to the ServiceAccount."""
    rules: list[dict[str, Any]] = []
    for (kind, _), binding in objs.items():
        if kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s["kind"] == "ServiceAccount" and s["name"] == account
                   for s in binding["subjects"]):
            continue
        ref = binding["roleRef"]
        rules += objs[(ref["kind"], ref["name"])]["rules"]
    return rules


def webhook_configuration_writes(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rules if "admissionregistration.k8s.io" in r["apiGroups"]
            and set(r["verbs"]) - {"get", "list", "watch"}]


def test_everything_namespaced_lives_in_raykueue_system(objs: dict) -> None:
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass",
                      "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
                      "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    for (kind, name), obj in objs.items():
        if kind not in cluster_scoped:
            assert obj["metadata"].get("namespace") == NAMESPACE, (kind, name)
    assert ("Namespace", NAMESPACE) in objs


def test_service_account_is_the_controller_identity(objs: dict,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    assert ("ServiceAccount", "raykueue") in objs
    deployment = objs[("Deployment", "raykueue")]
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    identity = c.service_account_user(NAMESPACE, account)
    assert identity == c.DEFAULT_CONTROLLER_IDENTITY
    assert settings_from(kubelet_env(deployment), monkeypatch).controller_identities == [identity]


def test_the_kubelet_expands_only_what_is_defined_above() -> None:
    """The resolver the manifests' tests read the Deployment's environment with."""
    deployment = {"metadata": {"namespace": "x"}, "spec": {"template": {"spec": {"containers": [
        {"env": [{"name": "A", "value": "$(NS).svc"},
                 {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                 {"name": "B", "value": "$(NS).svc"}]}]}}}}
    assert kubelet_env(deployment) == {"A": "$(NS).svc", "NS": "x", "B": "x.svc"}


def test_webhooks_match_the_contract(objs: dict) -> None:
    service = objs[("Service", "raykueue-webhook")]
    port = next(p for p in service["spec"]["ports"] if p["name"] == "webhook")
    for kind, name, path, op in (
        ("MutatingWebhookConfiguration", c.MUTATING_WEBHOOK_CONFIG, c.MUTATE_PATH, "CREATE"),
        ("ValidatingWebhookConfiguration", c.VALIDATING_WEBHOOK_CONFIG, c.VALIDATE_PATH, "UPDATE"),
    ):
        hook = objs[(kind, name)]["webhooks"][0]
        svc = hook["clientConfig"]["service"]
        assert (svc["name"], svc["namespace"], svc["path"], svc["port"]) == (
            "raykueue-webhook", NAMESPACE, path, port["port"])
        assert "caBundle" not in hook["clientConfig"]
        assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": [op],
                                  "resources": ["pods"], "scope": "Namespaced"}]
        assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
        (expr,) = hook["objectSelector"]["matchExpressions"]
        assert (expr["key"], expr["operator"], tuple(expr["values"])) == (
            c.NODE_TYPE_LABEL, "In", c.MANAGED_ROLES)
        (ns_expr,) = hook["namespaceSelector"]["matchExpressions"]
        assert ns_expr["key"] == "kubernetes.io/metadata.name"
        assert ns_expr["operator"] == "NotIn" and {NAMESPACE, "kube-system"} <= set(ns_expr["values"])
        assert 1 <= hook["timeoutSeconds"] <= 10
        assert hook["matchConditions"], "CEL narrows the scope beyond the label selectors"
    mutating = objs[("MutatingWebhookConfiguration", c.MUTATING_WEBHOOK_CONFIG)]["webhooks"][0]
    assert mutating["reinvocationPolicy"] == "IfNeeded"
    # The conditions name the very keys the admission code reads; what they
    # let through is proven against the real API server (tests/api/test_scope.py).
    (opt_in,) = mutating["matchConditions"]
    assert f"'{c.OPTED_IN_LABEL}'" in opt_in["expression"]
    assert c.STANDALONE_ANNOTATION in opt_in["expression"]
    assert f"'{c.RAY_API_GROUP}/'" in opt_in["expression"]
    validating = objs[("ValidatingWebhookConfiguration", c.VALIDATING_WEBHOOK_CONFIG)]["webhooks"][0]
    (gated,) = validating["matchConditions"]
    assert f"'{c.GATE}'" in gated["expression"] and "oldObject" in gated["expression"]
    # Sorts after Kueue's own configurations.
    assert c.MUTATING_WEBHOOK_CONFIG > "kueue-mutating-webhook-configuration"


def test_ray_object_webhooks_sit_around_kueues(objs: dict) -> None:
    service = objs[("Service", "raykueue-webhook")]
    port = next(p for p in service["spec"]["ports"] if p["name"] == "webhook")["port"]
    firsts = objs[("MutatingWebhookConfiguration", c.FIRST_MUTATING_WEBHOOK_CONFIG)]["webhooks"]
    last = objs[("MutatingWebhookConfiguration", c.MUTATING_WEBHOOK_CONFIG)]["webhooks"][1]
    # Before Kueue's configuration on the way in, after it on the way out.
    kueue = "kueue-mutating-webhook-configuration"
    assert c.FIRST_MUTATING_WEBHOOK_CONFIG < kueue < c.MUTATING_WEBHOOK_CONFIG
    # One first-stage entry per kind, since CEL reads each kind's templates where it keeps them.
    assert sorted(r for hook in firsts for r in hook["rules"][0]["resources"]) == [
        "rayclusters", "rayjobs", "rayservices"]
    for hook, path, policy in (*((f, c.RAY_OBJECTS_FIRST_PATH, "Never") for f in firsts),
                               (last, c.RAY_OBJECTS_LAST_PATH, "IfNeeded")):
        svc = hook["clientConfig"]["service"]
        assert (svc["name"], svc["namespace"], svc["path"], svc["port"]) == (
            "raykueue-webhook", NAMESPACE, path, port)
        (rule,) = hook["rules"]
        assert rule["apiGroups"] == [c.RAY_API_GROUP] and rule["operations"] == ["CREATE", "UPDATE"]
        # The first stage runs before Kueue's; the last is reinvoked after a reinvoked Kueue.
        assert hook["reinvocationPolicy"] == policy and hook["failurePolicy"] == "Fail"
        opt_in, scope = hook["matchConditions"]
        assert c.STANDALONE_ANNOTATION in opt_in["expression"]
        # Updates that change nothing of ours (the autoscaler's) never wait for raykueue.
        assert "request.operation == 'CREATE'" in scope["expression"]
        assert f"'{c.QUEUE_LABEL}'" in scope["expression"]
    assert set(last["rules"][0]["resources"]) == {"rayclusters", "rayjobs", "rayservices"}
    rayclusters = next(f for f in firsts if f["rules"][0]["resources"] == ["rayclusters"])
    assert f"'{c.OPTED_IN_LABEL}'" in rayclusters["matchConditions"][1]["expression"]


def test_no_pod_webhook_is_called_for_an_unstamped_ray_pod(objs: dict) -> None:
    """No legacy entry: a KubeRay pod without the stamp never reaches raykueue at
    creation (a cluster opted in before raykueue ran is adopted by the leader)."""
    hooks = objs[("MutatingWebhookConfiguration", c.MUTATING_WEBHOOK_CONFIG)]["webhooks"]
    pods = [h for h in hooks if h["rules"][0]["resources"] == ["pods"]]
    assert [h["name"] for h in pods] == ["mutate-pods.raykueue.io"]
    assert all(h["failurePolicy"] == "Fail" for h in hooks)


def test_the_stamp_is_protected_by_a_policy_bound_to_deny(objs: dict) -> None:
    policy = objs[("ValidatingAdmissionPolicy", c.STAMP_POLICY)]["spec"]
    binding = objs[("ValidatingAdmissionPolicyBinding", c.STAMP_POLICY)]["spec"]
    assert binding == {"policyName": c.STAMP_POLICY, "validationActions": ["Deny"]}
    assert policy["failurePolicy"] == "Fail"
    (rule,) = policy["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["rayclusters"] and rule["operations"] == ["CREATE", "UPDATE"]
    (ns_expr,) = policy["matchConstraints"]["namespaceSelector"]["matchExpressions"]
    assert ns_expr["operator"] == "NotIn" and {NAMESPACE, "kube-system"} <= set(ns_expr["values"])
    assert any(c.FIRST_MUTATING_WEBHOOK_CONFIG in v["messageExpression"] for v in policy["validations"])


def test_service_targets_the_pods_and_their_https_port(objs: dict) -> None:
    service = objs[("Service", "raykueue-webhook")]
    template = objs[("Deployment", "raykueue")]["spec"]["template"]
    labels = template["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    names = {p["name"] for p in container(objs)["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= names


def test_certificate_names_match_the_service_and_rbac(objs: dict) -> None:
    e = env(objs)
    assert kubelet_env(objs[("Deployment", "raykueue")])["RAYKUEUE_DNS_NAMES"].split(",") == SERVICE_DNS
    role = objs[("Role", "raykueue")]
    named = {(r["resources"][0], n) for r in role["rules"] for n in r.get("resourceNames", [])}
    assert ("secrets", e["RAYKUEUE_CERT_SECRET"]) in named
    assert ("leases", Settings().lease_name) in named
    assert e["RAYKUEUE_POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}


def test_rbac_restricts_webhook_patches_to_our_configurations(objs: dict) -> None:
    rules = granted_to(objs)
    writes = webhook_configuration_writes(rules)
    assert all(r.get("resourceNames") for r in writes)
    assert {n for r in writes for n in r["resourceNames"]} == {name for _, name in c.WEBHOOK_CONFIGS}
    for rule in rules:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
    cluster_wide = [r for (kind, _), role in objs.items() if kind == "ClusterRole"
                    for r in role["rules"]]
    secrets = [r for r in cluster_wide if "secrets" in r["resources"]]
    assert not secrets, "no cluster-wide access to Secrets"


def test_pod_is_locked_down(objs: dict) -> None:
    deployment = objs[("Deployment", "raykueue")]
    pod = deployment["spec"]["template"]["spec"]
    ctr = container(objs)
    sc = ctr["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert {m["mountPath"] for m in ctr["volumeMounts"]} == {"/tmp"}
    assert "--cert-dir" in ctr["args"] and ctr["args"][ctr["args"].index("--cert-dir") + 1] \
        .startswith("/tmp/")
    assert ctr["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert ctr["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert ctr["image"] == f"raykueue:{wheel_version()}"
    resources = ctr["resources"]
    assert {"cpu", "memory"} <= resources["requests"].keys() <= resources["limits"].keys()
    assert deployment["spec"]["replicas"] == 2
    assert objs[("PodDisruptionBudget", "raykueue")]["spec"]["minAvailable"] == 1


def test_pod_is_scheduled_ahead_and_drained_gracefully(objs: dict) -> None:
    pod = objs[("Deployment", "raykueue")]["spec"]["template"]["spec"]
    priority = objs[("PriorityClass", pod["priorityClassName"])]
    assert not priority.get("globalDefault")
    # Above any workload class, below the user-defined ceiling and the system classes.
    assert 1_000_000 < priority["value"] <= 1_000_000_000
    sleep = container(objs)["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert 0 < sleep < pod["terminationGracePeriodSeconds"]


def test_network_policy_admits_the_webhook_port_only(objs: dict) -> None:
    policy = objs[("NetworkPolicy", "raykueue")]["spec"]
    labels = objs[("Deployment", "raykueue")]["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["policyTypes"] == ["Ingress"]
    (rule,) = policy["ingress"]
    container_port = next(p["containerPort"] for p in container(objs)["ports"] if p["name"] == "https")
    assert rule["ports"] == [{"protocol": "TCP", "port": container_port}]


def test_priorities_component_has_the_default_classes() -> None:
    classes = by_name(build(PRIORITIES))
    assert set(classes) == {("WorkloadPriorityClass", c.DEFAULT_HEAD_PRIORITY_CLASS),
                            ("WorkloadPriorityClass", c.DEFAULT_WORKER_PRIORITY_CLASS)}
    head = classes[("WorkloadPriorityClass", c.DEFAULT_HEAD_PRIORITY_CLASS)]["value"]
    assert head > classes[("WorkloadPriorityClass", c.DEFAULT_WORKER_PRIORITY_CLASS)]["value"]


def test_examples_queue_an_opted_in_raycluster_in_the_form_that_shows_no_drift() -> None:
    examples = by_name(build(EXAMPLES))
    cluster = examples[("RayCluster", "sample")]
    rc = cluster["metadata"]
    assert rc["annotations"][c.STANDALONE_ANNOTATION] == "true"
    # Our annotation from the start, never the label raykueue would move
    # (tests/e2e/test_gitops.py applies this file twice).
    assert c.QUEUE_LABEL not in rc.get("labels", {})
    queue = rc["annotations"][c.QUEUE_ANNOTATION]
    spec = cluster["spec"]
    for template in [spec["headGroupSpec"]["template"]] + [g["template"] for g in spec["workerGroupSpecs"]]:
        assert template["metadata"]["labels"][c.OPTED_IN_LABEL] == c.OPTED_IN_VALUE
    assert {"name": ALLOCATE_TIMEOUT_ENV, "value": str(Settings().autoscaler_allocate_timeout_seconds)} in \
        spec["autoscalerOptions"]["env"]
    lq = examples[("LocalQueue", queue)]
    assert lq["metadata"]["namespace"] == rc["namespace"]
    assert ("ClusterQueue", lq["spec"]["clusterQueue"]) in examples


def test_with_cert_manager_raykueue_cannot_write_webhook_configurations(objs: dict) -> None:
    """The component says raykueue loses the RBAC for caBundle: cert-manager's CA
    injector writes it. Issue 21: the ClusterRole still let it patch all three."""
    assert webhook_configuration_writes(granted_to(objs)), "the base install injects caBundle"
    overlay = by_name(build(CERT_MANAGER))
    assert webhook_configuration_writes(granted_to(overlay)) == []
    # What coexist/ reads is still readable.
    reads = [r for r in granted_to(overlay) if "admissionregistration.k8s.io" in r["apiGroups"]]
    assert any("mutatingwebhookconfigurations" in r["resources"] and {"list", "watch"} <= set(r["verbs"])
               for r in reads)


def test_cert_manager_overlay_hands_the_certificate_to_cert_manager(objs: dict) -> None:
    overlay = by_name(build(CERT_MANAGER))
    # Everything the base installs is still there but the caBundle writer's role,
    # plus the issuer and certificate.
    injection = {("ClusterRole", "raykueue-ca-injection"), ("ClusterRoleBinding", "raykueue-ca-injection")}
    assert injection <= set(objs) and not injection & set(overlay)
    assert set(objs) - injection < set(overlay)
    assert {("Issuer", "raykueue-selfsigned"), ("Certificate", "raykueue-webhook")} <= set(overlay)
    cert = overlay[("Certificate", "raykueue-webhook")]
    assert cert["metadata"]["namespace"] == NAMESPACE
    assert cert["spec"]["dnsNames"] == SERVICE_DNS
    assert cert["spec"]["issuerRef"]["name"] in {n for k, n in overlay if k == "Issuer"}

    pod = overlay[("Deployment", "raykueue")]["spec"]["template"]["spec"]
    ctr = container(overlay)
    cert_dir = ctr["args"][ctr["args"].index("--cert-dir") + 1]
    mount = next(m for m in ctr["volumeMounts"] if m["mountPath"] == cert_dir)
    assert mount["readOnly"] is True
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == cert["spec"]["secretName"]
    assert volume["secret"]["defaultMode"] & 0o007 == 0, "the key is not world-readable"
    e = env(overlay)
    assert "RAYKUEUE_CERT_SECRET" not in e and e["RAYKUEUE_INJECT_CA_BUNDLE"] == "false"
    # The base's other settings survive the patch.
    assert e["RAYKUEUE_DNS_NAMES"] == env(objs)["RAYKUEUE_DNS_NAMES"]

    source = f"{NAMESPACE}/{cert['metadata']['name']}"
    for kind, name in (("MutatingWebhookConfiguration", c.MUTATING_WEBHOOK_CONFIG),
                       ("ValidatingWebhookConfiguration", c.VALIDATING_WEBHOOK_CONFIG)):
        config = overlay[(kind, name)]
        assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == source
        assert config["webhooks"] == objs[(kind, name)]["webhooks"]
    role = overlay[("Role", "raykueue")]
    assert not [r for r in role["rules"] if "secrets" in r["resources"]]


def test_raykueues_own_writes_are_bounded_by_a_policy(objs: dict) -> None:
    """The policy's names are the code's, and it binds exactly the account the server
    derives in the install's namespace (a same-named account elsewhere is someone
    else); what it refuses is shown on the real API server
    (tests/api/test_own_writes.py, tests/api/test_least_privilege.py)."""
    policy = objs[("ValidatingAdmissionPolicy", "raykueue-own-writes")]["spec"]
    binding = objs[("ValidatingAdmissionPolicyBinding", "raykueue-own-writes")]["spec"]
    assert binding == {"policyName": "raykueue-own-writes", "validationActions": ["Deny"]}
    assert policy["failurePolicy"] == "Fail"
    covered = {(r["apiGroups"][0], res, op) for r in policy["matchConstraints"]["resourceRules"]
               for res in r["resources"] for op in r["operations"]}
    operation = {"patch": "UPDATE", "update": "UPDATE", "delete": "DELETE", "create": "CREATE"}
    granted = {(g, res, operation[v]) for r in granted_to(objs) for g in r["apiGroups"]
               for res in r["resources"] for v in r["verbs"] if v in operation
               and res.split("/")[0] in ("pods", "workloads")}
    # Every write of pods and Workloads RBAC grants is under the policy; pods/finalizers
    # is only the OwnerReferencesPermissionEnforcement check of blockOwnerDeletion.
    assert granted - {("", "pods/finalizers", "UPDATE")} <= covered
    assert ("", "pods", "DELETE") in granted and ("kueue.x-k8s.io", "workloads/status", "UPDATE") in granted
    (account,) = policy["matchConditions"]
    text = yaml.safe_dump(policy)
    for name in (c.GATE, c.MANAGED_BY_LABEL, c.MANAGED_BY_VALUE):
        assert name in text
    for name in (c.OPTED_IN_LABEL, c.OPTED_IN_VALUE):
        assert name in text
    settings = Settings()
    assert account["expression"] == (
        f"request.userInfo.username == '{settings.controller_identities[0]}'")
