"""What tests/e2e/test_kueue_priority_defaulting.py shares with other tests (so that no test module imports
another). That module: Kueue's WorkloadPriorityClassDefaulting beside raykueue.
"""

from __future__ import annotations

import devstack
from devstack.components import COMPONENTS
from devstack.stack import restart_component


def restart_kueue(stack: devstack.Stack) -> None:
    restart_component(stack, "kueue")
    stack.wait_ready("kueue", lambda: COMPONENTS["kueue"].ready(stack))
