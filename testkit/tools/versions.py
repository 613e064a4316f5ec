"""What tests/tools/test_versions.py shares with other tests (so that no test module imports another). That
module: One version for the wheel, the chart and the image it runs.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def wheel_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
