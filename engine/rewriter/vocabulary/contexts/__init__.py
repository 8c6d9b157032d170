"""Contexts (`context:`), one registered object each."""
