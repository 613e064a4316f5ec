"""Figures the Ray tier's tests measure, printed once at the end of the run (tests/ray/conftest.py).

Speed is reported, never asserted: a test records what it saw here.
"""

from __future__ import annotations

from typing import Any

FIGURES: dict[str, Any] = {}
