"""docs/SETTINGS.md is what scripts/settings-reference makes of settings.py now."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from raykueue.app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "settings-reference"
PAGE = ROOT / "docs" / "SETTINGS.md"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=60, check=False)


def test_the_reference_is_current() -> None:
    out = run("--check")
    assert out.returncode == 0, out.stderr + " - run scripts/settings-reference and commit"


def test_every_setting_has_a_row_with_its_variable_and_a_description() -> None:
    rows = {line.split("|")[1].strip(" `"): line for line in PAGE.read_text().splitlines()
            if line.startswith("| `RAYKUEUE_")}
    assert set(rows) == {f"RAYKUEUE_{name.upper()}" for name in Settings.model_fields}
    for variable, row in rows.items():
        description = row.rstrip(" |").rsplit(" | ", 1)[1]
        assert len(description) > 10, variable


def test_a_stale_page_is_caught(tmp_path: Path) -> None:
    """--check compares against the file: a hand edit fails it (on a copy)."""
    copy = tmp_path / "SETTINGS.md"
    copy.write_text(PAGE.read_text().replace("RAYKUEUE_PORT", "RAYKUEUE_PORTS", 1))
    assert run("--check", "--target", str(copy)).returncode == 1
    copy.write_text(PAGE.read_text())
    assert run("--check", "--target", str(copy)).returncode == 0


def test_two_renders_are_identical() -> None:
    """Deterministic: the lead regenerates at merge and must get the same bytes."""
    first = subprocess.run([sys.executable, "-c", "import runpy,sys; sys.argv=['x'];"
                            f"m=runpy.run_path({str(SCRIPT)!r}, run_name='ref'); print(m['render']())"],
                           capture_output=True, text=True, timeout=60, check=True).stdout
    assert first == PAGE.read_text() + "\n"
