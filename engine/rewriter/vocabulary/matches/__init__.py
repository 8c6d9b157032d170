"""Match kinds (`match: {kind: ...}`), one registered object each."""
