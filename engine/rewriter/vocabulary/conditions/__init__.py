"""Conditions of `where:` entries, one registered object each."""
