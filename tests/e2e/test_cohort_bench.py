"""bench/cohort.py at its smallest, on the e2e tier's stack: a smoke run that proves the
script works end to end (both ways admit pods, the storm's pods run, every figure is
printed). No timing is asserted: the figures are the bench's, read in bench/RESULTS.md.

The bench restarts Kueue before each way (so that its CPU and peak RSS are the way's
own) and, since this stack's Kueue serves no metrics, turns them on for the run and
restores Kueue's configuration after it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import devstack

REPO_ROOT = Path(__file__).resolve().parents[2]
STORM_WORKERS = 2
CHECKPOINT = 2  # pending pods: both ways hold more once the quota is full
ARGS = ["--clusters", "3", "--workers", "2", "--quota-fraction", "0.5", "--queues", "1",
        "--storm-workers", str(STORM_WORKERS), "--max-wait", "300", "--checkpoints", str(CHECKPOINT)]
WAYS = ("kueue-elastic", "raykueue")


def table(out: str) -> dict[str, dict[str, str]]:
    """The bench's first markdown table: figure -> way -> cell."""
    lines = []
    for line in out.splitlines():
        if line.startswith("|"):
            if line.startswith("| "):  # not the |---| rule
                lines.append(line)
        elif lines:
            break
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert header[0] == "figure", lines[0]
    found: dict[str, dict[str, str]] = {}
    for line in lines[1:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        found[cells[0]] = dict(zip(header[1:], cells[1:], strict=True))
    return found


def growth(out: str) -> list[dict[str, str]]:
    """The growth-curve table's rows, each column by its header."""
    lines = [line for line in out.splitlines() if line.startswith("| checkpoint")]
    assert len(lines) == 1, out
    start = out.splitlines().index(lines[0])
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = []
    for line in out.splitlines()[start + 2:]:
        if not line.startswith("| "):
            break
        rows.append(dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True)))
    return rows


def test_cohort_bench_smoke(e2e_stack: devstack.Stack) -> None:
    env = {**os.environ, "RAYKUEUE_STACK_DIR": str(e2e_stack.dir)}
    owner = e2e_stack.read().owner
    proc = subprocess.run([sys.executable, "bench/cohort.py", *ARGS], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    # The bench is one more user of the session's stack, never its owner: had it taken the
    # stack over, the stack would outlive the test session (.ci/run fails on that).
    assert e2e_stack.read().owner == owner, "bench/cohort.py took the session's stack over"
    figures = table(proc.stdout)
    assert set(figures["nominal cpu over the cohort"]) == set(WAYS), out
    for way in WAYS:
        running, pending = (int(x.replace(",", "")) for x in
                            figures["Running when the quota is full / pending pods"][way].split(" / "))
        assert running > 0 and pending > 0, out
        assert figures["storm: urgent pods Running"][way] == str(STORM_WORKERS + 1), out
        assert int(figures["free: clusters deleted (pods freed)"][way].split()[0]) >= 1, out
        for name, cells in figures.items():
            if "raykueue" in name and way == "kueue-elastic":
                assert cells[way] == "not running", out  # raykueue's own figures, in its turn only
                continue
            assert cells[way] not in ("", "-", "none"), f"{name} missing for {way}:\n{out}"
            assert "bound reached" not in cells[way], f"{name} for {way}:\n{out}"
    # The growth curve: a row per way at the checkpoint, each figure there.
    rows = growth(proc.stdout)
    assert {r["way"] for r in rows} == set(WAYS), out
    for r in rows:
        assert r["checkpoint (pending pods)"] == str(CHECKPOINT), out
        assert int(r["pending then"].replace(",", "")) >= CHECKPOINT, out
        for column, cell in r.items():
            if "raykueue" in column and r["way"] == "kueue-elastic":
                assert cell == "not running", out
            elif column.startswith("Kueue cycle"):
                continue  # "none" is a true answer when the crossing came before Kueue's first attempt
            else:
                assert cell not in ("", "-", "none"), f"{column} missing for {r['way']}:\n{out}"
