"""Built-in analyses (`match: {engine: name}`), one registered object each."""
