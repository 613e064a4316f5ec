"""Shared by tests/unit/ (moved out of its test modules)."""
