"""Shared by tests/e2e/ (moved out of its test modules)."""
