"""docs/SECURITY.md names, for each path, the test that shows its answer: those tests exist.

A row's `file::test` (and a following `::test` of the same file) must name a test
function in that file; a bare `file` must exist. Rows left to other work say so
with "(scope)" and are not checked here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "SECURITY.md"
REFERENCE = re.compile(r"`((?:tests|testkit|examples)/[^`:\s]+)?(::([A-Za-z_0-9]+))?`")


def references() -> list[tuple[str, str | None]]:
    found: list[tuple[str, str | None]] = []
    for line in DOC.read_text().splitlines():
        if not line.startswith("| "):
            continue
        current: str | None = None
        for match in REFERENCE.finditer(line):
            path, _, test = match.groups()
            if path is None and test is None:
                continue
            current = path or current
            assert current is not None, f"'::{test}' with no file before it: {line}"
            found.append((current, test))
    return found


def test_every_test_the_security_page_names_exists() -> None:
    refs = references()
    assert len(refs) > 30
    for path, test in refs:
        if path.endswith("/..."):
            continue
        target = ROOT / path
        assert target.exists(), path
        if test is not None:
            assert re.search(rf"^(async )?def {test}\(", target.read_text(), re.MULTILINE), f"{path}::{test}"


def test_every_row_has_an_answer_and_a_test_or_says_why_not() -> None:
    for line in DOC.read_text().splitlines():
        if not re.match(r"\| [URS]\d+ \|", line):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == 4 and all(cells[:3]), line
        assert cells[3] and ("tests/" in cells[3] or "testkit/" in cells[3] or cells[3] == "-"), line
