"""Every generated bad review gets a decision or a BadReview, never an exception.

The HTTP server turns an exception inside a decision into a denial that says
"raykueue failed to decide"; that is a safety net, not an answer, so the pure
rules must handle every shape themselves. The API-tier test sends the same
kind of cases (more of them) through the real server.
"""

from __future__ import annotations

import pytest

from raykueue.core import contract as c
from raykueue.core.priority import PriorityPolicy
from raykueue.webhooks.admit import admit_create, admit_update
from raykueue.webhooks.classify import PodContext
from raykueue.webhooks.review import BadReview, parse
from testkit.fuzz_reviews import MUTATE, cases

CONTROLLERS = frozenset({c.DEFAULT_CONTROLLER_IDENTITY})
SEED = 20261202


@pytest.mark.parametrize("seed_offset", [0, 1])
def test_decisions_survive_generated_reviews(seed_offset: int) -> None:
    outcomes: dict[str, int] = {}
    for case in cases(1500, SEED + seed_offset, big=False):
        try:
            review = parse(case.body)
        except BadReview as exc:
            assert str(exc)  # a reason the client can read
            outcomes["bad"] = outcomes.get("bad", 0) + 1
            continue
        if case.path == MUTATE:
            outcome = admit_create(review, PodContext(), PriorityPolicy())
        else:
            outcome = admit_update(review, CONTROLLERS)
        verdict = outcome.verdict
        if not verdict.allowed:
            assert verdict.message
        if case.must_deny:
            assert not verdict.allowed, (case.kind, outcome)
        outcomes[outcome.decision] = outcomes.get(outcome.decision, 0) + 1
    # The generator reaches every kind of answer, so none of the above is vacuous.
    assert {"bad", "denied", "allowed", "skipped"} <= outcomes.keys(), outcomes


def test_the_generator_is_reproducible() -> None:
    first = [(x.path, x.body) for x in cases(50, 7, big=False)]
    assert first == [(x.path, x.body) for x in cases(50, 7, big=False)]
    assert first != [(x.path, x.body) for x in cases(50, 8, big=False)]
