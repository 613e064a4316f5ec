"""testkit/reads.py: the one way tests and benches say "not there" (404 only, never a failure)."""

from __future__ import annotations

from typing import Any

import pytest

from raykueue.kube.rest import ApiError
from testkit.reads import get_or_none, gone

PATH = "/api/v1/namespaces/ns/pods/p"


class Answers:
    """Answers each GET with `found`, or raises `error`."""

    def __init__(self, found: dict[str, Any] | None = None, error: ApiError | None = None) -> None:
        self.found, self.error = found, error

    def get(self, path: str) -> dict[str, Any]:
        assert path == PATH
        if self.error is not None:
            raise self.error
        assert self.found is not None
        return self.found


POD = {"metadata": {"name": "p", "uid": "u1"}}


def test_an_object_is_read_and_is_not_gone() -> None:
    api: Any = Answers(POD)
    assert get_or_none(api, PATH) == POD
    assert get_or_none(api, PATH, uid="u1") == POD
    assert not gone(api, PATH) and not gone(api, PATH, uid="u1")


def test_not_found_is_none_and_gone() -> None:
    api: Any = Answers(error=ApiError(404, "NotFound"))
    assert get_or_none(api, PATH) is None
    assert gone(api, PATH) and gone(api, PATH, uid="u1")


def test_a_namesake_with_another_uid_counts_as_gone() -> None:
    """The object asked about was deleted and one of the same name made in its place."""
    api: Any = Answers(POD)
    assert get_or_none(api, PATH, uid="u0") is None
    assert gone(api, PATH, uid="u0")


@pytest.mark.parametrize("status", [403, 500, 503])
def test_a_read_that_did_not_answer_is_never_taken_for_gone(status: int) -> None:
    api: Any = Answers(error=ApiError(status, "Failure"))
    with pytest.raises(ApiError):
        get_or_none(api, PATH)
    with pytest.raises(ApiError):
        gone(api, PATH)
