"""Shared by tests/ray/ (moved out of its test modules)."""
