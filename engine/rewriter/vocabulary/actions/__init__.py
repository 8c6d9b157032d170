"""Actions (`action:`), one registered object each."""
