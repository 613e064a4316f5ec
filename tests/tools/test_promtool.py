"""promtool checks the PrometheusRule's groups and runs their unit tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
KIT = ROOT / "manifests" / "components" / "monitoring"


def rules_dir(tmp_path: Path) -> Path:
    """The PrometheusRule's spec is a Prometheus rules file; rules.test.yaml
    names it rules.yaml."""
    spec = yaml.safe_load((KIT / "prometheusrule.yaml").read_text())["spec"]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec))
    shutil.copy(KIT / "rules.test.yaml", tmp_path / "rules.test.yaml")
    return tmp_path


def test_rules_pass_promtool_check(promtool, tmp_path: Path) -> None:
    out = promtool("check", "rules", rules_dir(tmp_path) / "rules.yaml")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_rules_pass_their_unit_tests(promtool, tmp_path: Path) -> None:
    out = promtool("test", "rules", "rules.test.yaml", cwd=rules_dir(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_broken_expectation_fails(promtool, tmp_path: Path) -> None:
    """The unit tests can fail: flip one alert's expected severity."""
    path = rules_dir(tmp_path) / "rules.test.yaml"
    path.write_text(path.read_text().replace("severity: critical}", "severity: info}", 1))
    out = promtool("test", "rules", "rules.test.yaml", cwd=tmp_path)
    assert out.returncode != 0 and "FAILED" in out.stdout + out.stderr
