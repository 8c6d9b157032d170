"""Benchmark the rewrite engine on the Python files of the installed `torch` package.

A dry run (nothing is written) of the engine over about 2000 real files, compared with the floor
libcst itself sets: `parse_module(text).code` on the same texts, in the same process, timed the
same way. Run from the project root:

    .venv/bin/python benchmarks/engine.py [--limit N] [--json FILE]
"""

from __future__ import annotations

import argparse
import ast
import gc
import hashlib
import importlib.util
import json
import platform
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import libcst as cst

from pytpu.engine.rewriter import checkout
from pytpu.engine.rewriter.kb import kb_dir
from pytpu.engine.rewriter.sources import Source, SourceError, discover, read_source

METHOD = """\
method:
  files      the engine's own selection (rewriter.sources.discover) under the torch package;
             with --limit N, N of them spread evenly over the sorted list
  load       every file read and decoded once (files.read_source) before any timing, so both
             timed passes start from the same text in memory and neither pays for the disk
  warm-up    one small parse + migration before timing (libcst's native parser, KB compile)
  floor      libcst.parse_module(text).code for every file, no transform, timed per file with
             perf_counter (wall) and process_time (CPU), gc.collect() before the pass; parse
             failures are timed too
  engine     checkout.rewrite_file(path, root, compiled, write=False) for every file (the loop
             checkout.run performs; read_source is served from the in-memory load), timed per
             file the same way, gc.collect() before the pass; includes the text pre-filter, the
             black lookup, parse, transform, rendering and the re-parse checks of the output
  passes     floor first, then engine, in one process; discovery is timed separately
  check      every changed output is re-parsed with libcst and ast after timing (untimed)"""


def torch_root() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        sys.exit("torch is not installed in this environment")
    return Path(spec.origin).parent


def engine_fingerprint() -> str:
    """A short hash of the engine's code and KB, to tie the figures to one state of them."""
    digest = hashlib.sha256()
    for package in (Path(checkout.__file__).parent, Path(kb_dir())):
        for path in sorted(package.glob("*")):
            if path.suffix in (".py", ".yaml", ".json"):
                digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def spread(items: list[Path], limit: int | None) -> list[Path]:
    if not limit or limit >= len(items):
        return items
    step = len(items) / limit
    return [items[int(i * step)] for i in range(limit)]


def error_reason(message: str) -> str:
    """The kind of an error message, without the file name and line numbers."""
    reason = message.split(": ", 1)[1] if ": " in message else message
    reason = re.sub(r"line \d+", "line N", reason)
    reason = re.sub(r"error at \d+:\d+", "error at N:N", reason)
    return reason.split(": expected one of")[0][:120]


Times = dict[Path, tuple[float, float]]  # path -> (wall seconds, CPU seconds of this process)


def time_floor(texts: dict[Path, str]) -> tuple[Times, int]:
    times: Times = {}
    failures = 0
    gc.collect()
    for path, text in texts.items():
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            cst.parse_module(text).code  # noqa: B018 - rendering is part of the floor
        except (cst.ParserSyntaxError, RecursionError):
            failures += 1
        times[path] = (time.perf_counter() - wall, time.process_time() - cpu)
    return times, failures


def time_engine(
    paths: list[Path], root: Path, sources: dict[Path, Source | SourceError]
) -> tuple[Times, list[checkout.FileResult], set[Path]]:
    served = 0

    def from_memory(path: Path, _root: Path | None = None) -> Source:
        nonlocal served
        served += 1
        loaded = sources[path]
        if isinstance(loaded, SourceError):
            raise loaded
        return loaded

    compiled = checkout.compiled_kb()
    times: Times = {}
    results: list[checkout.FileResult] = []
    parsed: set[Path] = set()
    real_read_source = checkout.read_source
    checkout.read_source = from_memory
    try:
        gc.collect()
        for path in paths:
            wall, cpu = time.perf_counter(), time.process_time()
            result, went_through = checkout.rewrite_file(path, root, compiled, write=False)
            times[path] = (time.perf_counter() - wall, time.process_time() - cpu)
            results.append(result)
            if went_through:
                parsed.add(path)
    finally:
        checkout.read_source = real_read_source
    if served != len(paths):
        print(
            f"warning: only {served} of {len(paths)} files were read through the in-memory "
            "read_source; the engine timings include disk reads for the others",
            file=sys.stderr,
        )
    return times, results, parsed


def check_outputs(results: list[checkout.FileResult]) -> dict[str, Any]:
    bad: list[str] = []
    ast_skipped = 0
    for result in results:
        if result.status != "changed" or result.after is None:
            continue
        try:
            cst.parse_module(result.after)
        except cst.ParserSyntaxError as exc:
            bad.append(f"{result.path}: libcst: {exc.message.splitlines()[0]}")
            continue
        try:
            ast.parse(result.before or "")
        except SyntaxError:
            ast_skipped += 1  # the interpreter here cannot parse the input either
            continue
        try:
            ast.parse(result.after)
        except SyntaxError as exc:
            bad.append(f"{result.path}: ast: line {exc.lineno}: {exc.msg}")
    return {"all_parse": not bad, "failures": bad, "ast_not_applicable": ast_skipped}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--limit", type=int, help="only N files, spread over the package")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--root", type=Path, default=None, help="another tree instead of torch")
    args = parser.parse_args(argv)

    root = (args.root or torch_root()).resolve()
    all_py = sum(1 for _ in root.rglob("*.py"))

    start = time.perf_counter()
    discovered, problems = discover(root)
    discovery_seconds = time.perf_counter() - start
    paths = spread(sorted(discovered), args.limit)

    sources: dict[Path, Source | SourceError] = {}
    for path in paths:
        try:
            sources[path] = read_source(path, root)
        except SourceError as exc:
            sources[path] = exc
    texts = {p: s.text for p, s in sources.items() if isinstance(s, Source)}
    megabytes = sum(len(t.encode("utf-8")) for t in texts.values()) / 1e6

    # warm-up: libcst's parser, the KB compile, black's import
    checkout.migrate_text("import torch\nx = torch.zeros(1).cuda()\n", checkout.compiled_kb())
    cst.parse_module("x = 1\n").code  # noqa: B018

    floor_times, floor_failures = time_floor(texts)
    engine_times, results, parsed = time_engine(paths, root, sources)

    changed = [r for r in results if r.status == "changed"]
    errors = [r for r in results if r.status == "error"]
    reasons: dict[str, list[str]] = defaultdict(list)
    for r in errors:
        reasons[error_reason(r.error or "")].append(r.path)
    outputs = check_outputs(results)
    findings = Counter(f.rule.id for r in results for f in r.findings)

    def total(times: Times, which: list[Path] | None = None) -> tuple[float, float]:
        keys = times if which is None else which
        return sum(times[p][0] for p in keys), sum(times[p][1] for p in keys)

    engine_total = total(engine_times)
    floor_total = total(floor_times)
    # on the files the pre-filter let through (and that could be read)
    passed = [p for p in paths if p in parsed and p in floor_times]
    engine_passed = total(engine_times, passed)
    floor_passed = total(floor_times, passed)
    rejected = [p for p in paths if p in texts and p not in parsed]
    engine_rejected = total(engine_times, rejected)
    floor_rejected = total(floor_times, rejected)

    def ratio(a: float, b: float) -> float | None:
        return round(a / b, 3) if b else None

    # per-file ratios on the files that went through the pipeline: the totals above are
    # dominated by a few very large files, the median says what a typical file costs
    per_file = sorted(
        engine_times[p][1] / floor_times[p][1] for p in passed if floor_times[p][1] > 0
    )

    def timing(engine: tuple[float, float], floor: tuple[float, float], files: int) -> dict:
        return {
            "files": files,
            "engine_wall_seconds": round(engine[0], 3),
            "engine_cpu_seconds": round(engine[1], 3),
            "floor_wall_seconds": round(floor[0], 3),
            "floor_cpu_seconds": round(floor[1], 3),
            "ratio_wall": ratio(engine[0], floor[0]),
            "ratio_cpu": ratio(engine[1], floor[1]),
            "engine_files_per_second_wall": round(files / engine[0], 1) if engine[0] else None,
            "floor_files_per_second_wall": round(files / floor[0], 1) if floor[0] else None,
        }

    report: dict[str, Any] = {
        "root": str(root),
        "engine_sources_sha256": engine_fingerprint(),
        "python": platform.python_version(),
        "libcst": getattr(cst, "__version__", None) or _version("libcst"),
        "python_files_under_root": all_py,
        "discovered": len(discovered),
        "discovery_skipped": [{"path": str(p), "reason": r} for p, r in problems],
        "discovery_seconds": round(discovery_seconds, 3),
        "files": len(paths),
        "megabytes": round(megabytes, 2),
        "unreadable": len(paths) - len(texts),
        "parsed": len(parsed),
        "skipped_by_prefilter": len(rejected),
        "changed": len(changed),
        "errors": len(errors),
        "error_reasons": {
            k: {"count": len(v), "examples": v[:3]} for k, v in sorted(reasons.items())
        },
        "outputs": outputs,
        "findings_by_rule": dict(findings.most_common()),
        "floor_parse_failures": floor_failures,
        "all_files": timing(engine_total, floor_total, len(paths)),
        "prefilter_passed": timing(engine_passed, floor_passed, len(passed)),
        "prefilter_rejected": timing(engine_rejected, floor_rejected, len(rejected)),
        "per_file_cpu_ratio_prefilter_passed": {
            "median": round(statistics.median(per_file), 2) if per_file else None,
            "p90": round(statistics.quantiles(per_file, n=10)[-1], 2) if per_file[1:] else None,
            "max": round(per_file[-1], 2) if per_file else None,
        },
        "slowest_engine_files": [
            {
                "path": p.relative_to(root).as_posix(),
                "engine_cpu_s": round(t[1], 3),
                "floor_cpu_s": round(floor_times[p][1], 3) if p in floor_times else None,
            }
            for p, t in sorted(engine_times.items(), key=lambda kv: -kv[1][1])[:5]
        ],
    }
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"\nwritten: {args.json}")
    return 0 if outputs["all_parse"] else 1


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def print_report(r: dict[str, Any]) -> None:
    print(f"PyTPU engine benchmark: dry run over {r['root']}")
    print(
        f"python {r['python']}, libcst {r['libcst']}, "
        f"engine+KB sources sha256 {r['engine_sources_sha256']}"
    )
    print(METHOD)
    print()
    print(f"python files under root     {r['python_files_under_root']}")
    print(
        f"discovered by the engine    {r['discovered']} in {r['discovery_seconds']:.2f} s "
        f"(vendored folders skipped; {len(r['discovery_skipped'])} reported)"
    )
    print(
        f"files benchmarked           {r['files']} ({r['megabytes']:.1f} MB of text, "
        f"{r['unreadable']} unreadable)"
    )
    print(f"full pipeline (parsed)      {r['parsed']}")
    print(f"skipped by the pre-filter   {r['skipped_by_prefilter']}")
    print(f"changed                     {r['changed']}")
    print(f"errors                      {r['errors']}")
    for reason, info in r["error_reasons"].items():
        print(f"  {info['count']:4d} x {reason}")
        for example in info["examples"]:
            print(f"         e.g. {example}")
    out = r["outputs"]
    verdict = "yes" if out["all_parse"] else f"NO ({len(out['failures'])} failures)"
    print(
        f"every output parses         {verdict} (changed outputs re-parsed with libcst and ast; "
        f"{out['ast_not_applicable']} inputs not ast-parsable)"
    )
    for failure in out["failures"][:10]:
        print(f"  {failure}")
    top = ", ".join(f"{k} {v}" for k, v in list(r["findings_by_rule"].items())[:8])
    print(f"findings by rule (top 8)    {top}")
    print()
    print("timings (wall = perf_counter; cpu = process_time, less sensitive to other load)")
    header = f"  {'':24}{'files':>6}{'engine wall':>13}{'floor wall':>12}{'ratio':>7}"
    header += f"{'engine cpu':>12}{'floor cpu':>11}{'ratio':>7}"
    print(header)
    for label, key in (
        ("all files", "all_files"),
        ("pre-filter passed", "prefilter_passed"),
        ("pre-filter rejected", "prefilter_rejected"),
    ):
        t = r[key]
        print(
            f"  {label:24}{t['files']:>6}"
            f"{t['engine_wall_seconds']:>12.2f}s{t['floor_wall_seconds']:>11.2f}s"
            f"{_fmt(t['ratio_wall']):>7}"
            f"{t['engine_cpu_seconds']:>11.2f}s{t['floor_cpu_seconds']:>10.2f}s"
            f"{_fmt(t['ratio_cpu']):>7}"
        )
    a = r["all_files"]
    print(
        f"total seconds (engine, wall) {a['engine_wall_seconds']:.2f}; files per second: engine "
        f"{a['engine_files_per_second_wall']}, libcst floor {a['floor_files_per_second_wall']}"
    )
    print(
        f"engine / floor: {a['ratio_wall']} wall, {a['ratio_cpu']} cpu (all files); "
        f"{r['prefilter_passed']['ratio_wall']} wall, {r['prefilter_passed']['ratio_cpu']} cpu "
        "(only the files the pre-filter passed)"
    )
    m = r["per_file_cpu_ratio_prefilter_passed"]
    print(
        f"per-file engine/floor cpu ratio on pre-filter passed files: median {m['median']}, "
        f"p90 {m['p90']}, max {m['max']}"
    )
    print(f"floor parse failures        {r['floor_parse_failures']}")
    print("slowest files (engine cpu s / floor cpu s):")
    for item in r["slowest_engine_files"]:
        floor = f"{item['floor_cpu_s']:7.3f}" if item["floor_cpu_s"] is not None else "      -"
        print(f"  {item['engine_cpu_s']:7.3f} / {floor}  {item['path']}")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    sys.exit(main())
