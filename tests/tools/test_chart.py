"""charts/raykueue: `helm lint`, and the same objects as manifests/.

For each chart option, `helm template` must render what `kubectl kustomize`
makes of manifests/ with the matching Component, up to what Helm adds for its
own bookkeeping (the helm.sh/chart and managed-by labels) and the order of
lists whose items are keyed by name (env, volumes, ...), which kustomize's
strategic merge reorders and nothing reads in order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.tools.chart import CHART, OPTIONS, assert_same, kustomize, objects, template


@pytest.mark.parametrize("options", [[], *[[o] for o in OPTIONS]],
                         ids=lambda o: "+".join(o) or "defaults")
def test_chart_renders_what_kustomize_builds(helm, kubectl, tmp_path: Path,
                                             options: list[str]) -> None:
    chart = objects(template(helm, *options), from_helm=True)
    kustomized = objects(kustomize(kubectl, tmp_path, [OPTIONS[o] for o in options]),
                         from_helm=False)
    assert_same(chart, kustomized)


def test_comparison_notices_a_difference(helm, kubectl, tmp_path: Path) -> None:
    chart = objects(template(helm, "replicas=3"), from_helm=True)
    kustomized = objects(kustomize(kubectl, tmp_path, []), from_helm=False)
    with pytest.raises(AssertionError):
        assert_same(chart, kustomized)


@pytest.mark.parametrize("sets", [[], list(OPTIONS)],
                         ids=["defaults", "every-option"])
def test_helm_lint_is_clean(helm, sets: list[str]) -> None:
    args = ["lint", "--strict", CHART]
    for s in sets:
        args += ["--set", s]
    out = helm(*args)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 chart(s) failed" in out.stdout


def test_values_reach_the_objects(helm) -> None:
    objs = objects(template(helm, "image.repository=registry.example.com/raykueue",
                            "image.tag=0.1.0", "replicas=3", "priorities.create=true",
                            "priorities.head.name=gold", "priorities.head.value=5000",
                            "extraEnv.RAYKUEUE_STUCK_GRACE_SECONDS=300", namespace="ray-ops"),
                   from_helm=True)
    deployment = objs[("Deployment", "raykueue")]
    assert deployment["spec"]["replicas"] == 3
    assert deployment["metadata"]["namespace"] == "ray-ops"
    (ctr,) = deployment["spec"]["template"]["spec"]["containers"]
    assert ctr["image"] == "registry.example.com/raykueue:0.1.0"
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert env["RAYKUEUE_HEAD_PRIORITY_CLASS"] == "gold"
    assert "RAYKUEUE_WORKER_PRIORITY_CLASS" not in env
    assert env["RAYKUEUE_STUCK_GRACE_SECONDS"] == "300"
    # Resolved by the kubelet from the pod's namespace (tests/tools/test_install_namespace.py).
    assert env["RAYKUEUE_DNS_NAMES"].split(",")[0] == "raykueue-webhook.$(RAYKUEUE_POD_NAMESPACE).svc"
    assert objs[("WorkloadPriorityClass", "gold")]["value"] == 5000
    hook = objs[("MutatingWebhookConfiguration", "zz-raykueue-mutating")]["webhooks"][0]
    assert hook["clientConfig"]["service"]["namespace"] == "ray-ops"
    (excluded,) = hook["namespaceSelector"]["matchExpressions"]
    assert excluded["values"] == ["kube-system", "ray-ops"]


def test_values_outside_the_schema_are_refused(helm) -> None:
    out = helm("template", "raykueue", CHART, "--set", "replicas=zero")
    assert out.returncode != 0 and "replicas" in out.stderr
