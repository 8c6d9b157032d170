"""Positions the walk marks nodes in: one module each, registered in `MARKS`."""
