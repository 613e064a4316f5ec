"""A container's environment as the kubelet hands it to the process.

For tests that read a rendered Deployment (kustomize, Helm) and ask what the
server will make of it: downward-API fields resolved for the pod's namespace
and ServiceAccount, `$(VAR)` references expanded in list order, and the real
`Settings` built from the result.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pytest

from raykueue.app.settings import Settings

_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def kubelet_env(deployment: dict[str, Any]) -> dict[str, str]:
    """The environment of the Deployment's (only) container, resolved."""
    pod = deployment["spec"]["template"]["spec"]
    fields = {"metadata.namespace": deployment["metadata"]["namespace"],
              "spec.serviceAccountName": pod.get("serviceAccountName", "default")}
    (container,) = pod["containers"]
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "valueFrom" in var:
            env[var["name"]] = fields[var["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            # Only variables defined above expand; anything else stays as written.
            env[var["name"]] = _REFERENCE.sub(lambda m: env.get(m[1], m[0]), var.get("value", ""))
    return env


def settings_from(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """`Settings()` as the server builds them from exactly `env`."""
    for name in [n for n in os.environ if n.startswith("RAYKUEUE_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings()
