"""Kubernetes label selectors (matchLabels / matchExpressions), evaluated in Python."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether `labels` satisfy `selector`; None selects everything, as Kubernetes reads it."""
    if selector is None:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False  # an operator we do not know selects nothing, never everything
    return True


def namespace_labels(name: str) -> dict[str, str]:
    """The label every namespace carries; enough for Kueue's default namespace selector."""
    return {"kubernetes.io/metadata.name": name}
