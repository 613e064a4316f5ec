"""charts/raykueue: the values Kueue's and KubeRay's charts have reach the pod spec,
the schema refuses their typos, and NOTES.txt says what was installed.

The defaults render what manifests/ builds (tests/tools/test_chart.py); here each
value is set and found where it belongs, and nowhere else.
"""

from __future__ import annotations

from typing import Any

import pytest

from testkit.tools.chart import CHART, objects, template

SELECTOR = {"app.kubernetes.io/name": "raykueue", "app.kubernetes.io/component": "webhook"}


def deployment(helm, *sets: str) -> dict[str, Any]:
    return objects(template(helm, *sets), from_helm=True)[("Deployment", "raykueue")]


def test_scheduling_values_land_on_the_pod_spec(helm) -> None:
    d = deployment(helm, "nodeSelector.node-role\\.example\\.com/infra=yes",
                   "tolerations[0].key=dedicated", "tolerations[0].operator=Equal",
                   "tolerations[0].value=infra", "tolerations[0].effect=NoSchedule",
                   "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                   ".nodeSelectorTerms[0].matchExpressions[0].key=zone",
                   "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                   ".nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
                   "imagePullSecrets[0].name=my-registry")
    pod = d["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"node-role.example.com/infra": "yes"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "infra",
                                   "effect": "NoSchedule"}]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [{"matchExpressions": [{"key": "zone",
                                                                 "operator": "Exists"}]}]
    assert pod["imagePullSecrets"] == [{"name": "my-registry"}]
    # An affinity adds to the spread, it does not replace it.
    assert len(pod["topologySpreadConstraints"]) == 2


def test_unset_scheduling_values_leave_no_empty_fields(helm) -> None:
    pod = deployment(helm)["spec"]["template"]["spec"]
    for key in ("nodeSelector", "tolerations", "affinity", "imagePullSecrets"):
        assert key not in pod, key
    assert "annotations" not in deployment(helm)["spec"]["template"]["metadata"]


def test_pod_annotations_and_labels_go_on_the_pods_only(helm) -> None:
    d = deployment(helm, "podAnnotations.example\\.com/owner=ray-platform",
                   "podLabels.team=ray-platform")
    meta = d["spec"]["template"]["metadata"]
    assert meta["annotations"] == {"example.com/owner": "ray-platform"}
    assert meta["labels"] == {**SELECTOR, "team": "ray-platform"}
    # The selector never changes under a running Deployment; the Deployment's own
    # labels stay the chart's.
    assert d["spec"]["selector"]["matchLabels"] == SELECTOR
    assert "team" not in d["metadata"]["labels"]
    assert "annotations" not in d["metadata"]


def test_priority_class_default_is_the_charts_own(helm) -> None:
    objs = objects(template(helm), from_helm=True)
    pod = objs[("Deployment", "raykueue")]["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "raykueue-critical"
    assert objs[("PriorityClass", "raykueue-critical")]["value"] == 100000000


@pytest.mark.parametrize(("value", "expected"), [("system-cluster-critical", "system-cluster-critical"),
                                                 ("", None)], ids=["another-class", "none"])
def test_another_priority_class_replaces_the_charts_own(helm, value: str,
                                                        expected: str | None) -> None:
    objs = objects(template(helm, f"priorityClassName={value}"), from_helm=True)
    pod = objs[("Deployment", "raykueue")]["spec"]["template"]["spec"]
    assert pod.get("priorityClassName") == expected
    # Nothing would use it: not installed.
    assert ("PriorityClass", "raykueue-critical") not in objs


def test_image_tag_defaults_to_the_app_version_and_a_set_tag_wins(helm) -> None:
    import yaml
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    (ctr,) = deployment(helm)["spec"]["template"]["spec"]["containers"]
    assert ctr["image"] == f"raykueue:{app_version}"
    (ctr,) = deployment(helm, "image.tag=dev-1")["spec"]["template"]["spec"]["containers"]
    assert ctr["image"] == "raykueue:dev-1"


@pytest.mark.parametrize(("sets", "named"), [
    (["nodeSelectr.disk=ssd"], "nodeSelectr"),
    (["tolerations[0].efect=NoSchedule"], "efect"),
    (["tolerations[0].effect=NoSchedul"], "effect"),
    (["affinity.nodeAfinity.x=y"], "nodeAfinity"),
    (["imagePullSecrets[0].nam=my-registry"], "nam"),
    (["podLabels.app\\.kubernetes\\.io/component=other"], "podLabels"),
    (["priorityClassName=Not_A_Name"], "priorityClassName"),
    (["nameOverride=rk"], "nameOverride"),
    (["fullnameOverride=rk"], "fullnameOverride"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_the_schema_refuses_a_typo_and_names_it(helm, sets: list[str], named: str) -> None:
    args = ["template", "raykueue", CHART]
    for s in sets:
        args += ["--set", s]
    out = helm(*args)
    assert out.returncode != 0, out.stdout[:200]
    assert "schema" in out.stderr and named in out.stderr, out.stderr


def test_lint_is_clean_with_every_new_value(helm) -> None:
    out = helm("lint", "--strict", CHART, "--set", "nodeSelector.disk=ssd",
               "--set", "tolerations[0].operator=Exists", "--set", "imagePullSecrets[0].name=r",
               "--set", "podAnnotations.a=b", "--set", "podLabels.c=d",
               "--set", "priorityClassName=system-cluster-critical")
    assert out.returncode == 0, out.stdout + out.stderr


def notes(helm, *sets: str) -> str:
    # A client-side dry run renders NOTES.txt without a cluster (helm template leaves it out).
    args = ["install", "rk", CHART, "--dry-run=client", "--namespace", "ray-ops"]
    for s in sets:
        args += ["--set", s]
    out = helm(*args)
    assert out.returncode == 0, out.stderr
    assert "NOTES:" in out.stdout, out.stdout[-500:]
    return out.stdout.split("NOTES:", 1)[1]


def test_notes_say_what_was_installed_and_how_to_check_it(helm) -> None:
    text = notes(helm, "image.repository=registry.example.com/raykueue")
    assert "namespace ray-ops" in text
    assert "registry.example.com/raykueue:0.1.0" in text
    assert "kubectl -n ray-ops rollout status deployment/raykueue" in text
    assert "Secret raykueue-webhook-tls" in text
    assert "priorities.create=false" in text
    assert "raykueue explain POD -n NAMESPACE" in text
    assert "charts/raykueue/README.md" in text


def test_notes_follow_the_options(helm) -> None:
    text = notes(helm, "priorities.create=true", "certManager.enabled=true",
                 "monitoring.enabled=true")
    assert "WorkloadPriorityClasses ray-head (1000) and ray-worker (100)" in text
    assert "cert-manager's" in text and "raykueue-webhook-tls" not in text
    assert "ServiceMonitor" in text
