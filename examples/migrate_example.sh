#!/usr/bin/env bash
# Migrate the bundled example end to end, as a user would: a copy of examples/cuda_mnist in a git
# repository of its own (build/example by default), then `pytpu migrate` on it. Prints the
# verdict, the two commits of the branch pytpu/migrate, and where the rendered report is.
# PYTPU names the `pytpu` command to run (default: .venv/bin/pytpu, which .ci/setup makes).
set -euo pipefail
cd "$(dirname "$0")/.."
target="${1:-build/example}"
rm -rf "$target"
mkdir -p "$target"
cp -r examples/cuda_mnist/. "$target"
git -C "$target" init -q -b main
git -C "$target" add -A
git -C "$target" -c user.name=Example -c user.email=example@example.invalid commit -q -m "A CUDA training script"
status=0
"${PYTPU:-.venv/bin/pytpu}" migrate "$target" || status=$?
if git -C "$target" rev-parse -q --verify pytpu/migrate >/dev/null; then
    echo "pytpu/migrate in $target:"
    git -C "$target" log --format='  %h %s' main..pytpu/migrate
    echo "report: $target/.pytpu/report.md"
else
    echo "no branch pytpu/migrate in $target (the run stopped before it)"
fi
exit "$status"
