"""Every alert's runbook_url lands on a section of docs/FAILURE_MODES.md.

The rules are read from manifests/ (the chart links the same file); the
page's anchors are derived the way GitHub derives them from headings.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "FAILURE_MODES.md"
RULES = ROOT / "manifests" / "components" / "monitoring" / "prometheusrule.yaml"
CHART_RULES = ROOT / "charts" / "raykueue" / "files" / "prometheusrule.yaml"
URL = "https://github.com/raykueue/raykueue/blob/main/docs/FAILURE_MODES.md#"


def anchor(heading: str) -> str:
    """GitHub's slug: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    return {anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.MULTILINE)}


def alerts(path: Path) -> list[dict[str, Any]]:
    doc = yaml.safe_load(path.read_text())
    return [r for g in doc["spec"]["groups"] for r in g["rules"] if "alert" in r]


def test_the_chart_serves_the_same_rules() -> None:
    assert CHART_RULES.resolve() == RULES.resolve()


@pytest.mark.parametrize("rule", alerts(RULES), ids=lambda r: r["alert"])
def test_every_alert_links_to_its_own_section(rule: dict[str, Any]) -> None:
    url = rule["annotations"].get("runbook_url", "")
    assert url.startswith(URL), f"{rule['alert']}: runbook_url {url!r}"
    fragment = url.removeprefix(URL)
    assert fragment in anchors(PAGE.read_text()), f"{rule['alert']}: no section #{fragment}"
    assert fragment == anchor(rule["alert"]), "one section per alert, named after it"


def test_every_section_says_what_how_and_what_to_do() -> None:
    sections = re.split(r"^## ", PAGE.read_text(), flags=re.MULTILINE)[1:]
    names = {s.split("\n", 1)[0].strip() for s in sections}
    assert names == {r["alert"] for r in alerts(RULES)}, "a section per alert, none stale"
    for section in sections:
        for part in ("**What it means.**", "**How to check.**", "**What to do.**"):
            assert part in section, f"{section.split(chr(10), 1)[0]}: {part} missing"


def test_a_missing_section_is_caught() -> None:
    assert "raykueuenoleader" in anchors(PAGE.read_text())
    assert "raykueuenoleader" not in anchors(PAGE.read_text().replace("## RaykueueNoLeader", "## X"))
