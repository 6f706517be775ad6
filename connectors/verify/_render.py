"""Render a :class:`CheckReport` as rich tables."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table

from connectors.verify._analysis import AnomalyKind, CheckReport

# Example anomalies shown per kind in the rendered report.
EXAMPLES_SHOWN = 5


def report_table(report: CheckReport, title: str = "exactly-once check") -> Group:
    """Build the rich renderable of ``report``: counts, anomalies by kind, examples."""
    verdict = "[bold green]OK[/]" if report.ok else "[bold red]FAILED[/]"
    counts = Table(title=f"{title}: {verdict}", show_header=True)
    counts.add_column("measure")
    counts.add_column("value", justify="right")
    counts.add_row("input records", f"{report.input_records:,}")
    counts.add_row("committed output records (read_committed)", f"{report.committed_records:,}")
    counts.add_row("output records incl. aborted (read_uncommitted)",
                   f"{report.uncommitted_records:,}")
    counts.add_row("aborted records (hidden from read_committed)", f"{report.aborted_records:,}")
    counts.add_row("output partitions", str(report.output_partitions))
    counts.add_row("commit / abort markers", f"{report.commit_markers} / {report.abort_markers}")
    counts.add_row("last committed epoch",
                   str(report.last_committed_epoch) if report.epoch_log_checked else "not checked")
    kinds = Table(title="anomalies by type", show_header=True)
    kinds.add_column("type")
    kinds.add_column("count", justify="right")
    for kind in AnomalyKind:
        n = report.count(kind)
        kinds.add_row(kind.value, f"[red]{n}[/]" if n else "0")
    parts: list[Table] = [counts, kinds]
    if not report.ok:
        examples = Table(title="examples", show_header=True)
        for col in ("type", "record", "position", "detail"):
            examples.add_column(col)
        for kind in AnomalyKind:
            for a in report.anomalies(kind)[:EXAMPLES_SHOWN]:
                pos = "" if a.partition is None else f"p{a.partition}@{a.offset}"
                examples.add_row(kind.value, a.record_id or "", pos, a.detail)
        parts.append(examples)
    return Group(*parts)


def print_report(report: CheckReport, console: Console | None = None) -> None:
    """Print ``report`` to ``console`` (stdout by default)."""
    (console or Console()).print(report_table(report))
    for note in report.notes:
        (console or Console()).print(f"[dim]{note}[/]")
