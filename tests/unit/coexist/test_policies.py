"""coexist/policies.py: which of raykueue's admission policies are not enforced, and why it matters.

Read from what manifests/ ships, so that a renamed policy or binding fails here
before it fails on a cluster; what the API server holds is shown in
tests/api/test_policy_check.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from raykueue.coexist.policies import (
    KIND,
    OWN_WRITES_POLICY,
    POLICIES,
    policy_findings,
    unenforced,
)
from raykueue.core import contract as c

ROOT = Path(__file__).resolve().parents[3] / "manifests"
IDENTITY = c.DEFAULT_CONTROLLER_IDENTITY


def shipped() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    docs = [d for f in ("webhooks.yaml", "own-writes-policy.yaml")
            for d in yaml.safe_load_all((ROOT / f).read_text()) if d]
    return ([d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"],
            [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"])


def test_the_shipped_install_is_enforced_as_it_stands() -> None:
    policies, bindings = shipped()
    assert {p["metadata"]["name"] for p in policies} == set(POLICIES)
    assert unenforced(True, policies, bindings, IDENTITY) == {}


def test_a_missing_binding_is_named_with_what_it_leaves_open() -> None:
    policies, bindings = shipped()
    left = [b for b in bindings if b["metadata"]["name"] != c.STAMP_POLICY]
    missing = unenforced(True, policies, left, IDENTITY)
    assert set(missing) == {c.STAMP_POLICY}
    text = missing[c.STAMP_POLICY].message
    assert "no ValidatingAdmissionPolicyBinding" in text and c.STAMP_POLICY in text
    assert "outside quota" in text
    assert missing[c.STAMP_POLICY].kind == KIND


def test_a_binding_that_only_warns_or_audits_does_not_enforce() -> None:
    policies, bindings = shipped()
    audit = [{**b, "spec": {**b["spec"], "validationActions": ["Warn", "Audit"]}}
             if b["metadata"]["name"] == OWN_WRITES_POLICY else b for b in bindings]
    assert set(unenforced(True, policies, audit, IDENTITY)) == {OWN_WRITES_POLICY}


def test_a_missing_policy_is_named() -> None:
    policies, bindings = shipped()
    left = [p for p in policies if p["metadata"]["name"] != OWN_WRITES_POLICY]
    missing = unenforced(True, left, bindings, IDENTITY)
    assert set(missing) == {OWN_WRITES_POLICY}
    assert "is missing" in missing[OWN_WRITES_POLICY].message
    assert "delete or change any pod" in missing[OWN_WRITES_POLICY].message


def test_an_own_writes_policy_naming_another_account_bounds_someone_else() -> None:
    """An overlay that moved raykueue's namespace but not the name in the policy."""
    policies, bindings = shipped()
    moved = c.service_account_user("ray-ops", c.DEFAULT_SERVICE_ACCOUNT)
    missing = unenforced(True, policies, bindings, moved)
    assert set(missing) == {OWN_WRITES_POLICY}
    assert moved in missing[OWN_WRITES_POLICY].message
    # A namesake that merely ends the same way is not a match.
    namesake = c.service_account_user("ray", "raykueue-system:raykueue")
    assert set(unenforced(True, policies, bindings, namesake)) == {OWN_WRITES_POLICY}


def test_an_api_server_without_the_kinds_enforces_none_and_says_so_once() -> None:
    missing = unenforced(False, [], [], IDENTITY)
    assert set(missing) == set(POLICIES)
    (finding,) = policy_findings(missing)
    assert "before 1.30" in finding.message
    assert all(name in finding.message for name in POLICIES)
