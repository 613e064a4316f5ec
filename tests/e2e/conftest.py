"""Fixtures the tests under tests/e2e/ share (defined in testkit)."""
from testkit.e2e.controller import admin, controller, queue, webhooks  # noqa: F401 - fixtures
from testkit.e2e.handover import kueue_takes_labelled_namespaces  # noqa: F401 - fixtures
