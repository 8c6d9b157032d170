"""Verification: the suites on both sides of a migration (parity) and the step benchmark."""
