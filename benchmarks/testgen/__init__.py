"""Benchmark `pytpu testgen` on one repository: how long generation takes, how much of the program
the generated suite runs, and how many seeded bugs in the model code it catches.

    .venv/bin/python -m benchmarks.testgen REPO --run "python train.py" [--out tests/pytpu]
        [--max-mutants N] [--timeout S] [--jobs J] [--seed N] [--json FILE] [--skip-generate]

The suite is the directory OUT inside REPO (relative paths are taken from REPO). It must pass on
the unmutated code, and it must find the program relative to its own location (mutants run in
copies of REPO).

Modules: cli (the steps and the report's order), model_code (which classes are model code),
operators (the mutation operators), mutants (sampling, running and scoring mutants), runs (child
processes), line_coverage, report (the tables).
"""
