"""Kubernetes I/O primitives with no knowledge of the application's domain.

Nothing in this package imports from the rest of the project, so it can be
tested (and reasoned about) on its own.
"""
