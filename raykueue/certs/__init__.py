"""Serving certificates: issue, store, hot reload, and caBundle injection."""
