"""Execution targets: pure libraries called by the worker (no Django imports here)."""
