"""Benchmarks (run as scripts; not part of the test suite)."""
