"""Per-file facts the vocabulary's entries share: one module each, registered in `FACTS`."""
