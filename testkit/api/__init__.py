"""Shared by tests/api/ (moved out of its test modules)."""
