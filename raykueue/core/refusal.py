"""A refusal: what every pure admission rule answers when it says no.

One type for the pod's classification, the update's validation, the Ray objects'
rules and the priority rule, so `webhooks/admit.py` answers every refusal one way.
The message is the user's to read: what was refused, why, and what to do instead.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Refusal:
    message: str
