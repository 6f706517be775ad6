"""Write the benchmarks' target table into docs/perf-notes.md and the README's summary.

Run ``python -m benchmarks.summary`` after the benchmarks (``--check`` only reports whether
the docs are up to date). It reads the last run's results under ``benchmarks/results/``
(``bench_sink.json``, ``bench_job.json``, ``bench_source.json``, ``bench_postgres.json``:
each holds the target lines the benchmark printed, ``benchmarks._targets``, and the command
that ran it; a file without ``"targets"`` is skipped) and
replaces the text between the markers ``<!-- targets:start -->`` / ``<!-- targets:end -->``
in docs/perf-notes.md (one row per target: the target, MET / NOT MET, the measured value,
the command) and ``<!-- bench-summary:start -->`` / ``<!-- bench-summary:end -->`` in
README.md (one line per benchmark), so neither is edited by hand. A benchmark without a
result file keeps its rows out; the load average of each run is shown with it.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PERF_NOTES = ROOT / "docs" / "perf-notes.md"
README = ROOT / "README.md"
SOURCES = ("bench_sink", "bench_job", "bench_source", "bench_postgres")
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


def targets_table(docs: dict[str, dict[str, Any]]) -> str:
    """The Markdown table of every target of every result document."""
    lines = [
        "| target | verdict | measured | load | command |",
        "|---|---|---|---|---|",
    ]
    for name, doc in docs.items():
        command = doc.get("command", f"python -m benchmarks.{name}")
        for t in doc.get("targets", []):
            lines.append(
                f"| {t['name']} | {_verdict(t['met'])} | {t['shown']} | {_load(doc)} "
                f"| `{command}` |"
            )
    return "\n".join(lines)


def _summary_line(name: str, doc: dict[str, Any]) -> str:
    targets = doc["targets"]
    met = sum(1 for t in targets if t["met"])
    shown = "; ".join(f"{t['name']}: {t['shown']}" for t in targets)
    command = doc.get("command", f"python -m benchmarks.{name}")
    return f"- `{command}` (load {_load(doc)}): {met} of {len(targets)} targets met. {shown}."


def readme_summary(docs: dict[str, dict[str, Any]]) -> str:
    """The README's lines: one per benchmark, its targets and measured values."""
    head = (
        "Last recorded run of the issue-23 targets (written by `python -m benchmarks.summary` "
        "from `benchmarks/results/`; every target with its command: docs/perf-notes.md):"
    )
    return "\n".join([head, "", *(_summary_line(n, d) for n, d in docs.items())])


def replace_block(text: str, mark: str, body: str) -> str:
    """``text`` with the block between ``<!-- mark:start -->`` and ``<!-- mark:end -->`` set."""
    pattern = re.compile(
        rf"(<!-- {re.escape(mark)}:start -->\n).*?(\n<!-- {re.escape(mark)}:end -->)", re.S
    )
    if not pattern.search(text):
        msg = f"no <!-- {mark}:start --> ... <!-- {mark}:end --> block found"
        raise ValueError(msg)
    return pattern.sub(lambda m: m.group(1) + body + m.group(2), text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale docs (exit 1)")
    args = parser.parse_args(argv)
    docs = load()
    if not docs:
        print(f"no results under {RESULTS}: run the benchmarks first")
        return 1
    stale = []
    for path, mark, body in (
        (PERF_NOTES, TARGETS_MARK, targets_table(docs)),
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
