"""Whether the API server enforces raykueue's three ValidatingAdmissionPolicies.

The policies guard what no raykueue process can: they hold while raykueue is
down, and they bound raykueue's own account. They are only there if the API
server serves admissionregistration.k8s.io/v1 ValidatingAdmissionPolicies
(Kubernetes 1.30 and later) and the install applied them and their bindings;
a policy without a binding that denies is not enforced at all. A pure function
of what the API server holds: each policy missing, unbound, or (the own-writes
policy) naming another account than this replica's is a finding that says what
is unprotected without it. A finding never makes a replica unready: the
webhooks still work, only the guards behind them are gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from raykueue.coexist.findings import Finding
from raykueue.core import contract as c

KIND: Final = "PolicyMissing"
OWN_WRITES_POLICY: Final = "raykueue-own-writes"
GATED_AT_CREATION_POLICY: Final = "raykueue-gated-at-creation"
# What each policy protects, and so what is open without it.
UNPROTECTED: Final[Mapping[str, str]] = {
    OWN_WRITES_POLICY: (
        "raykueue's ServiceAccount may delete or change any pod (other teams' and RayClusters' that "
        "never opted in) and write any Workload's status, Kueue's admission included: RBAC cannot "
        "name objects by label"),
    c.STAMP_POLICY: (
        "an opted-in RayCluster created while raykueue's first webhook is missing keeps unstamped "
        "templates and its pods run outside quota, and a RayCluster that never opted in may carry "
        "the stamp and put its pods under raykueue"),
    GATED_AT_CREATION_POLICY: (
        "a stamped pod whose gate a later mutating webhook removed (or a pod written with the stamp "
        "and no gate) is created ungated and runs outside quota"),
}
POLICIES: Final = tuple(UNPROTECTED)
WHERE: Final = ("manifests/own-writes-policy.yaml and manifests/webhooks.yaml "
                "(the Helm chart renders them too)")


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _denies(binding: Mapping[str, Any], policy: str) -> bool:
    spec = _spec(binding)
    return spec.get("policyName") == policy and "Deny" in (spec.get("validationActions") or [])


def _binds(policy: Mapping[str, Any], identity: str) -> bool:
    """Whether the own-writes policy's match conditions name `identity` (exactly, quoted)."""
    return any(f"'{identity}'" in str(cond.get("expression") or "")
               for cond in _spec(policy).get("matchConditions") or [] if isinstance(cond, Mapping))


def unenforced(served: bool, policies: Iterable[Mapping[str, Any]],
               bindings: Iterable[Mapping[str, Any]], identity: str) -> dict[str, Finding]:
    """Each policy not enforced as shipped, with the finding that says so.

    `served`: whether the API server serves the v1 kinds (False: none is enforced,
    whatever was applied); `identity` is this replica's username
    (system:serviceaccount:<namespace>:<account>).
    """
    if not served:
        finding = Finding(KIND, (
            "the API server does not serve admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy "
            f"(Kubernetes before 1.30): none of {', '.join(POLICIES)} is enforced. Unprotected: "
            + "; ".join(f"without {name}, {what}" for name, what in UNPROTECTED.items())))
        return dict.fromkeys(POLICIES, finding)
    found = {_name(p): p for p in policies}
    held = list(bindings)
    out: dict[str, Finding] = {}
    for name, what in UNPROTECTED.items():
        policy = found.get(name)
        if policy is None:
            out[name] = Finding(KIND, (
                f"ValidatingAdmissionPolicy {name} is missing: {what}. Apply it and its binding "
                f"from {WHERE}"))
        elif not any(_denies(b, name) for b in held):
            out[name] = Finding(KIND, (
                f"ValidatingAdmissionPolicy {name} has no ValidatingAdmissionPolicyBinding with "
                f"validationActions [Deny], so it is not enforced: {what}. Apply the binding {name} "
                f"from {WHERE}"))
        elif name == OWN_WRITES_POLICY and not _binds(policy, identity):
            out[name] = Finding(KIND, (
                f"ValidatingAdmissionPolicy {name} does not name this replica's account {identity} "
                f"(raykueue moved to another namespace without it?), so it bounds someone else: "
                f"{what}. Set the account in its matchConditions (examples/another-namespace shows "
                "the kustomize replacement; the Helm chart sets it)"))
    return out


def policy_findings(missing: Mapping[str, Finding]) -> list[Finding]:
    """The findings of `unenforced`, each once (one for all when none is served)."""
    return list(dict.fromkeys(missing.values()))
