"""charts/raykueue's pre-delete hook, as `helm template` renders it (issue 28, item 6).

The Job must run `raykueue uninstall --yes` (with --handback unless turned off)
as an account of its own whose ClusterRole holds what that command does, before
Helm deletes anything, and go away with its account once it succeeded. What the
command then does on a real stack: tests/e2e/test_uninstall_hook.py (as this
account) and tests/node/test_uninstall_helm.py (`helm uninstall` itself).
"""

from __future__ import annotations

from typing import Any

import yaml

from testkit.tools.chart import CHART, NAMESPACE


def hooks(helm, *sets: str) -> dict[str, dict[str, Any]]:
    args = ["template", "raykueue", CHART, "--namespace", NAMESPACE]
    for s in sets:
        args += ["--set", s]
    out = helm(*args)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    return {d["kind"]: d for d in docs
            if "helm.sh/hook" in ((d.get("metadata") or {}).get("annotations") or {})}


def test_the_hook_runs_the_uninstall_first_as_its_own_account(helm) -> None:
    found = hooks(helm)
    assert set(found) == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job"}
    for kind, doc in found.items():
        notes = doc["metadata"]["annotations"]
        assert notes["helm.sh/hook"] == "pre-delete", kind
        # Recreated on a retry, gone once it worked; a failed Job stays to be read.
        assert notes["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded", kind
    # The account and its rights exist before the Job starts.
    weight = {k: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for k, d in found.items()}
    assert max(v for k, v in weight.items() if k != "Job") < weight["Job"]
    pod = found["Job"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["raykueue"]
    assert container["args"] == ["uninstall", "--yes", "--handback", "--timeout", "240"]
    account = found["ServiceAccount"]["metadata"]
    assert pod["serviceAccountName"] == account["name"] != "raykueue"  # not bound by own-writes
    (subject,) = found["ClusterRoleBinding"]["subjects"]
    assert (subject["name"], subject["namespace"]) == (account["name"], NAMESPACE)
    assert found["ClusterRoleBinding"]["roleRef"]["name"] == found["ClusterRole"]["metadata"]["name"]
    # Restricted Pod Security, as the release namespace enforces it.
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_the_hook_grants_what_the_uninstall_writes_and_nothing_of_secrets(helm) -> None:
    rules = hooks(helm)["ClusterRole"]["rules"]
    granted = {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    for need in (("ray.io", "rayclusters", "patch"), ("ray.io", "rayjobs", "patch"),
                 ("", "pods", "delete"), ("kueue.x-k8s.io", "workloads", "delete"),
                 ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "delete"),
                 ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "delete")):
        assert need in granted, need
    assert not any(r in ("secrets", "*") for _, r, _ in granted)
    assert not any(v in ("*", "escalate", "bind", "impersonate") for _, _, v in granted)


def test_the_hook_can_be_left_out_or_park_instead_of_handing_back(helm) -> None:
    assert hooks(helm, "uninstallHook.enabled=false") == {}
    job = hooks(helm, "uninstallHook.handback=false")["Job"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert "--handback" not in container["args"]
