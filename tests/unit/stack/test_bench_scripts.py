"""Every bench script starts as README and bench/RESULTS.md run it: `python bench/<x>.py`
from the repository root, which finds devstack, testkit and bench.* through bench/_repo.py
alone (the install makes only raykueue importable). `--help` imports all a script
imports and starts no server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = sorted(p for p in (ROOT / "bench").glob("*.py")
                 if 'if __name__ == "__main__":' in p.read_text())


def test_the_bench_scripts_are_found() -> None:
    """The list below is not empty by accident (a renamed guard would hide every script)."""
    assert {p.name for p in SCRIPTS} >= {"admission.py", "cohort.py", "compare.py", "elastic.py"}


def test_every_bench_script_starts_from_the_repository_root() -> None:
    # Nothing of this session's own sys.path reaches the scripts: only what a user has.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    runs = {p.name: subprocess.Popen([sys.executable, f"bench/{p.name}", "--help"], cwd=ROOT, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for p in SCRIPTS}  # side by side: each pays its imports once
    failed = {}
    for name, proc in runs.items():
        out, err = proc.communicate(timeout=120)
        if proc.returncode != 0 or "usage:" not in out:
            failed[name] = f"exit {proc.returncode}: {err.strip()[-500:]}"
    assert not failed, failed
