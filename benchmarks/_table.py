"""Print benchmark results as a rich table (shared by every benchmark)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

Cell = str | int | float


def _format(cell: Cell) -> str:
    if isinstance(cell, float):
        return f"{cell:,.2f}" if abs(cell) < 100 else f"{cell:,.0f}"
    if isinstance(cell, int):
        return f"{cell:,}"
    return cell


def print_table(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Cell]],
    console: Console | None = None,
) -> None:
    """Print ``rows`` under ``columns``; numbers are right-aligned with thousands separators."""
    table = Table(title=title)
    numeric = [all(isinstance(r[i], int | float) for r in rows) for i in range(len(columns))]
    for name, is_number in zip(columns, numeric, strict=True):
        table.add_column(name, justify="right" if is_number else "left")
    for row in rows:
        table.add_row(*(_format(cell) for cell in row))
    (console or Console()).print(table)


def optional_cell(x: float | None, digits: int = 2) -> Cell:
    """A measured value rounded for a table cell; empty when it was not measured."""
    return "" if x is None else round(x, digits)
