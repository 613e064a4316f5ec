"""The checkout on sys.path, for the bench scripts: each imports this module before any
module of the repository's own.

The scripts run from a clone as `python bench/<script>.py` (README, bench/RESULTS.md),
which puts bench/ itself first on sys.path, not the repository root; and the install
(`pip install -e .`) makes only `raykueue` importable, so `devstack`, `testkit` and
`bench.*` would not be found without this. Python finds this module in bench/, the
script's own folder, whatever the current directory.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
