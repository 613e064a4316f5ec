"""Fixtures the tests under tests/api/ share (defined in testkit)."""
from testkit.api.controller import admin, as_controller, ns, run_controller, scope  # noqa: F401 - fixtures
from testkit.api.install import installed  # noqa: F401 - fixtures
