"""charts/raykueue/README.md, the values reference, is what scripts/chart-reference
makes of the chart now: it cannot go stale, leave a value out, or list a fixed
name the chart does not render.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from testkit.tools.chart import CHART, OPTIONS, template

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "chart-reference"


def reference() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("chart_reference", str(SCRIPT))
    spec = importlib.util.spec_from_loader("chart_reference", loader)
    assert spec
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def check(chart: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, SCRIPT, "--chart", chart, "--check"],
                          capture_output=True, text=True, timeout=60)


def test_the_checked_in_reference_is_current() -> None:
    out = check(CHART)
    assert out.returncode == 0, out.stderr


@pytest.fixture
def chart_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "raykueue"
    shutil.copytree(CHART, copy, symlinks=True)
    return copy


def add_value(chart: Path, comment: str) -> None:
    values = chart / "values.yaml"
    values.write_text(values.read_text() + f"{comment}\nhostNetwork: false\n")
    schema = chart / "values.schema.json"
    text = schema.read_text()
    anchor = '    "resources": {"type": "object"},'
    assert anchor in text
    schema.write_text(text.replace(anchor, anchor + '\n    "hostNetwork": {"type": "boolean"},'))


def test_a_new_value_makes_the_reference_stale(chart_copy: Path) -> None:
    add_value(chart_copy, "# Run on the node's network.")
    out = check(chart_copy)
    assert out.returncode == 1 and "stale" in out.stderr
    reference().main(["--chart", str(chart_copy)])
    assert "| `hostNetwork` | boolean | `false` | Run on the node's network. |" in (
        chart_copy / "README.md").read_text()
    assert check(chart_copy).returncode == 0


def test_a_value_without_a_comment_is_refused(chart_copy: Path) -> None:
    add_value(chart_copy, "")
    out = check(chart_copy)
    assert out.returncode != 0 and "hostNetwork has no comment" in out.stderr


def test_a_value_the_schema_lacks_is_refused(chart_copy: Path) -> None:
    values = chart_copy / "values.yaml"
    values.write_text(values.read_text() + "# Documented but unchecked.\nhostNetwork: false\n")
    out = check(chart_copy)
    assert out.returncode != 0 and "hostNetwork" in out.stderr and "schema" in out.stderr


def test_every_value_has_a_row() -> None:
    import yaml
    text = (CHART / "README.md").read_text()
    for key in yaml.safe_load((CHART / "values.yaml").read_text()):
        assert f"| `{key}" in text, key


def test_the_fixed_names_are_the_charts(helm) -> None:
    rendered = {(d["kind"], d["metadata"]["name"]) for d in template(helm, *OPTIONS)}
    module = reference()
    for kind, name, _ in module.FIXED_NAMES:
        assert (kind, name) in rendered, (kind, name)
    # The run-time objects: the chart's Role grants on exactly these names.
    role = next(d for d in template(helm) if d["kind"] == "Role" and d["metadata"]["name"] == "raykueue")
    granted = {n for rule in role["rules"] for n in rule.get("resourceNames", [])}
    assert {name for _, name, _ in module.FIXED_ELSEWHERE} <= granted
