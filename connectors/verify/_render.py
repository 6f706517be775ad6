"""Render a :class:`CheckReport` (topic) or a :class:`TableReport` (table) as rich tables."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, Group
from rich.table import Table

from connectors.verify._analysis import TOPIC_KINDS, Anomaly, AnomalyKind, CheckReport
from connectors.verify._table import TABLE_KINDS, TableReport

# Example anomalies shown per kind in the rendered report.
EXAMPLES_SHOWN = 5


def report_table(report: CheckReport | TableReport, title: str | None = None) -> Group:
    """Build the rich renderable of ``report``: counts, anomalies by kind, examples."""
    verdict = "[bold green]OK[/]" if report.ok else "[bold red]FAILED[/]"
    counts = Table(show_header=True)
    counts.add_column("measure")
    counts.add_column("value", justify="right")
    if isinstance(report, TableReport):
        counts.title = f"{title or 'exactly-once check of table ' + report.table}: {verdict}"
        _table_counts(report, counts)
        kinds: Sequence[AnomalyKind] = TABLE_KINDS
    else:
        counts.title = f"{title or 'exactly-once check'}: {verdict}"
        _topic_counts(report, counts)
        kinds = TOPIC_KINDS
    counts.add_row(
        "last committed epoch",
        str(report.last_committed_epoch) if report.epoch_log_checked else "not checked",
    )
    by_kind = Table(title="anomalies by type", show_header=True)
    by_kind.add_column("type")
    by_kind.add_column("count", justify="right")
    for kind in kinds:
        n = report.count(kind)
        by_kind.add_row(kind.value, f"[red]{n}[/]" if n else "0")
    parts: list[Table] = [counts, by_kind]
    if not report.ok:
        parts.append(_examples(report.examples, kinds))
    return Group(*parts)


def _topic_counts(report: CheckReport, counts: Table) -> None:
    counts.add_row("input records", f"{report.input_records:,}")
    counts.add_row("committed output records (read_committed)", f"{report.committed_records:,}")
    counts.add_row(
        "output records incl. aborted (read_uncommitted)", f"{report.uncommitted_records:,}"
    )
    counts.add_row("aborted records (hidden from read_committed)", f"{report.aborted_records:,}")
    counts.add_row("output partitions", str(report.output_partitions))
    counts.add_row("commit / abort markers", f"{report.commit_markers} / {report.abort_markers}")


def _table_counts(report: TableReport, counts: Table) -> None:
    counts.add_row("input records", f"{report.input_records:,}")
    counts.add_row(f"table rows expected ({report.write_mode})", f"{report.expected_rows:,}")
    counts.add_row("table rows", f"{report.table_rows:,}")
    counts.add_row("prepared transactions of the sink left", str(len(report.prepared)))


def _examples(examples: Sequence[Anomaly], kinds: Sequence[AnomalyKind]) -> Table:
    table = Table(title="examples", show_header=True)
    for col in ("type", "record", "position", "detail"):
        table.add_column(col)
    for kind in kinds:
        for a in [e for e in examples if e.kind is kind][:EXAMPLES_SHOWN]:
            pos = "" if a.partition is None else f"p{a.partition}"
            pos += "" if a.offset is None else f"@{a.offset}"
            table.add_row(kind.value, a.record_id or "", pos, a.detail)
    return table


def print_report(report: CheckReport | TableReport, console: Console | None = None) -> None:
    """Print ``report`` to ``console`` (stdout by default)."""
    out = console or Console()
    out.print(report_table(report))
    for note in report.notes:
        out.print(f"[dim]{note}[/]")
