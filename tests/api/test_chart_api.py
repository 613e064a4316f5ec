"""The Helm chart's output validates against the real kube-apiserver.

Server-side dry run of `helm template` (as tests/api/test_manifests.py does for
kustomize), with every option on: the API server runs defaulting, schema and
CRD validation, pruning included, on each object, against the CRDs of
prometheus-operator and cert-manager that controlplane/tools/build.sh copies
from their modules. Those CRDs are installed for this module and removed after.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from devstack.config import default_bin_dir, share_dir
from testkit.api.chart import CHART, template
from testkit.api.manifests import dry_run

CRDS = share_dir(default_bin_dir()) / "crds"
OPTIONS = ("priorities.create=true", "certManager.enabled=true", "monitoring.enabled=true")


@pytest.fixture(scope="module")
def operator_crds(kubectl) -> Iterator[list[str]]:
    files = sorted((CRDS / "prometheus-operator").glob("*.yaml")) + sorted(
        (CRDS / "cert-manager").glob("*.yaml"))
    if not files:
        pytest.fail(f"no CRDs under {CRDS}/{{prometheus-operator,cert-manager}}; "
                    "run controlplane/build.sh")
    args = [a for f in files for a in ("-f", str(f))]
    out = kubectl("apply", "--server-side", "--field-manager=chart-test", "-o", "name", *args)
    assert out.returncode == 0, out.stderr
    names = out.stdout.split()
    kubectl("wait", "--for=condition=Established", "--timeout=60s", *names, check=True)
    yield names
    kubectl("delete", "--wait=false", *names)


def test_defaults_are_accepted(kubectl, new_namespace) -> None:
    ns = new_namespace("chart")
    applied = dry_run(kubectl, CHART, ns, template(ns))
    assert {"Deployment", "Service", "PodDisruptionBudget", "Role", "ClusterRole",
            "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
            "NetworkPolicy", "PriorityClass"} <= {o["kind"] for o in applied}


def test_every_option_is_accepted_and_nothing_is_pruned(kubectl, new_namespace,
                                                        operator_crds: list[str]) -> None:
    ns = new_namespace("chart-all")
    docs = template(ns, *OPTIONS)
    sent = {(d["kind"], d["metadata"]["name"]): json.loads(json.dumps(d)) for d in docs}
    applied = {(o["kind"], o["metadata"]["name"]): o for o in dry_run(kubectl, CHART, ns, docs)}
    assert {"ServiceMonitor", "PrometheusRule", "ConfigMap", "Certificate", "Issuer",
            "WorkloadPriorityClass"} <= {kind for kind, _ in applied}
    # A field the CRD's schema does not know would be pruned silently.
    for kind in ("PrometheusRule", "ServiceMonitor", "Certificate"):
        assert applied[(kind, _name(sent, kind))]["spec"] == sent[(kind, _name(sent, kind))]["spec"]
    dashboard = applied[("ConfigMap", "raykueue-dashboard")]
    assert json.loads(dashboard["data"]["raykueue.json"])["uid"] == "raykueue"


def _name(objs: dict[tuple[str, str], Any], kind: str) -> str:
    (name,) = [n for k, n in objs if k == kind]
    return name
