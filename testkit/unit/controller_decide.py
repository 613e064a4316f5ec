"""What tests/unit/controller/test_decide.py shares with other tests (so that no test module imports
another). That module: Every rule of `decide`, on objects shaped like the real ones.
"""

from __future__ import annotations

from raykueue.controller import decide as d
from testkit import controller_objects as o

PRIORITIES = {"ray-head": 1000, "ray-worker": 100}


def ctx(**kw) -> d.Context:
    base = {"flavors": {o.FLAVOR: o.flavor(node_labels={"pool": "a100"},
                                           tolerations=[{"key": "pool", "operator": "Equal",
                                                         "value": "a100",
                                                         "effect": "NoSchedule"}])},
            "priority_values": PRIORITIES, "head_admitted": True}
    base.update(kw)
    return d.Context(**base)
