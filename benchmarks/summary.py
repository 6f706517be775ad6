"""Write the benchmarks' target tables into docs/performance.md and the README.

Run ``python -m benchmarks.summary`` after the benchmarks (``--check`` only reports whether
the docs are up to date; ``--results DIR`` reads another results directory). It reads the
last run's results under ``benchmarks/results/`` (``bench_sink.json``, ``bench_job.json``,
``bench_source.json``, ``bench_postgres.json``: each holds the target lines the benchmark
printed, ``benchmarks._targets``, and the command that ran it; a file without
``"targets"`` is skipped) and replaces the text between markers, so neither doc is edited
by hand:

* ``<!-- targets:start -->`` / ``<!-- targets:end -->`` in docs/performance.md: one row per
  target (benchmark, target, measured value in full, MET / NOT MET), then each run's
  command and load average;
* ``<!-- bench-summary:start -->`` / ``<!-- bench-summary:end -->`` in README.md: one row per
  benchmark, readable at a glance: how many of its targets are met and which are not (with
  the measured value without its details), pointing at docs/performance.md.

A benchmark without a result file keeps its rows out.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PERFORMANCE = ROOT / "docs" / "performance.md"
README = ROOT / "README.md"
SOURCES = (
    "bench_sink",
    "bench_job",
    "bench_source",
    "bench_postgres",
    "bench_latency",
    "bench_growth",
    "soak_memory",
)
TARGETS_MARK = "targets"
SUMMARY_MARK = "bench-summary"


def load(names: Sequence[str] = SOURCES, results: Path = RESULTS) -> dict[str, dict[str, Any]]:
    """The result documents found, by benchmark name."""
    out = {}
    for name in names:
        path = results / f"{name}.json"
        if path.is_file():
            doc = json.loads(path.read_text())
            if isinstance(doc, dict) and doc.get("targets"):
                out[name] = doc
    return out


def _verdict(met: bool | None) -> str:
    return "not measured" if met is None else "**MET**" if met else "**NOT MET**"


def _load(doc: dict[str, Any]) -> str:
    load = doc.get("load_average", {})
    before, after = load.get("before", [None])[0], load.get("after", [None])[0]
    return "" if before is None else f"{before:.1f} -> {after:.1f}"


def _rows(docs: dict[str, dict[str, Any]], measured: Callable[[str], str]) -> list[str]:
    lines = ["| benchmark | target | measured | verdict |", "|---|---|---|---|"]
    for name, doc in docs.items():
        for t in doc.get("targets", []):
            lines.append(
                f"| {name} | {t['name']} | {measured(t['shown'])} | {_verdict(t['met'])} |"
            )
    return lines


def _command(name: str, doc: dict[str, Any]) -> str:
    return str(doc.get("command", f"python -m benchmarks.{name}"))


def targets_table(docs: dict[str, dict[str, Any]]) -> str:
    """docs/performance.md's table: every target of every result, then the runs."""
    runs = ", ".join(f"`{_command(n, d)}` (load {_load(d)})" for n, d in docs.items())
    return "\n".join([*_rows(docs, str), "", f"Runs: {runs}."])


def _at_a_glance(shown: str) -> str:
    """The measured value without its details: ``x0.49; arrow-produce...`` -> ``x0.49``."""
    return re.split(r"; | \(", shown, maxsplit=1)[0]


def readme_summary(docs: dict[str, dict[str, Any]]) -> str:
    """The README's table: one row per benchmark, its targets met and those not met."""
    head = (
        "The last recorded run of each benchmark with targets (`python -m benchmarks.summary` "
        "writes this table from `benchmarks/results/`; every target, the values in full, the "
        "commands and what bounds them: docs/performance.md):"
    )
    lines = ["| benchmark | targets met | not met (measured) |", "|---|---|---|"]
    for name, doc in docs.items():
        targets = doc.get("targets", [])
        met = sum(1 for t in targets if t["met"])
        missed = [f"{t['name']} ({_at_a_glance(t['shown'])})" for t in targets if t["met"] is False]
        lines.append(f"| {name} | {met} of {len(targets)} | {'; '.join(missed) or 'none'} |")
    return "\n".join([head, "", *lines])


def replace_block(text: str, mark: str, body: str) -> str:
    """``text`` with the block between ``<!-- mark:start -->`` and ``<!-- mark:end -->`` set
    (the block may be empty: the two markers on consecutive lines)."""
    pattern = re.compile(
        rf"(<!-- {re.escape(mark)}:start -->\n)(?:.*?\n)?(<!-- {re.escape(mark)}:end -->)", re.S
    )
    if not pattern.search(text):
        msg = f"no <!-- {mark}:start --> ... <!-- {mark}:end --> block found"
        raise ValueError(msg)
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale docs (exit 1)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the results directory")
    args = parser.parse_args(argv)
    docs = load(results=args.results)
    if not docs:
        print(f"no results under {args.results}: run the benchmarks first")
        return 1
    stale = []
    for path, mark, body in (
        (PERFORMANCE, TARGETS_MARK, targets_table(docs)),
        (README, SUMMARY_MARK, readme_summary(docs)),
    ):
        old = path.read_text()
        new = replace_block(old, mark, body)
        if new != old:
            stale.append(path.name)
            if not args.check:
                path.write_text(new)
    verb = "stale" if args.check else "updated"
    print(f"{verb}: {', '.join(stale)}" if stale else "up to date")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
