"""Scripts that measure PyTPU and print figures; run them from the project root with
`.venv/bin/python -m benchmarks.NAME` (startup, engine, testgen)."""
