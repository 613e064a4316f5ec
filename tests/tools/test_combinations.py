"""The optional parts as users combine them: chart and kustomize agree, and each
reference between parts lands on an object the install has.

Before: cert-manager and monitoring together left the ServiceMonitor reading its CA
from raykueue-webhook-tls, a Secret only raykueue's own certificates make (the chart
was right, kustomize was not); tests rendered one option at a time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testkit.tools.chart import OPTIONS, assert_same, kustomize, objects, template

# chart options -> the Components in the order the docs give (monitoring before
# cert-manager: cert-manager's Component points an existing ServiceMonitor at its Secret)
COMBINATIONS = [
    ["monitoring.enabled=true", "certManager.enabled=true"],
    ["priorities.create=true", "monitoring.enabled=true", "certManager.enabled=true"],
    ["priorities.create=true", "certManager.enabled=true"],
    ["priorities.create=true", "monitoring.enabled=true"],
]


def ca_secret_is_made(objs: dict[tuple[str, str], dict[str, Any]]) -> None:
    """The ServiceMonitor's CA Secret is the one this install makes: cert-manager's
    Certificate's, or (without it) raykueue's own shared Secret."""
    monitor = objs.get(("ServiceMonitor", "raykueue"))
    if monitor is None:
        return
    wanted = monitor["spec"]["endpoints"][0]["tlsConfig"]["ca"]["secret"]["name"]
    certificates = [o for (kind, _), o in objs.items() if kind == "Certificate"]
    if certificates:
        assert wanted in {c["spec"]["secretName"] for c in certificates}
    else:
        deployment = objs[("Deployment", "raykueue")]
        env = {e["name"]: e.get("value") for e in
               deployment["spec"]["template"]["spec"]["containers"][0].get("env", [])}
        assert wanted == env["RAYKUEUE_CERT_SECRET"]


@pytest.mark.parametrize("options", COMBINATIONS, ids=lambda o: "+".join(o))
def test_combined_parts_agree_and_refer_to_what_is_installed(helm, kubectl, tmp_path: Path,
                                                             options: list[str]) -> None:
    chart = objects(template(helm, *options), from_helm=True)
    kustomized = objects(kustomize(kubectl, tmp_path, [OPTIONS[o] for o in options]),
                         from_helm=False)
    assert_same(chart, kustomized)
    ca_secret_is_made(chart)
    ca_secret_is_made(kustomized)
