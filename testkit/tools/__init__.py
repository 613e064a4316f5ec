"""Shared by tests/tools/ (moved out of its test modules)."""
