"""Fixtures of the PostgreSQL integration tests.

Every test reaches PostgreSQL through a DSN (``postgres_dsn``, integration_tests/conftest.py)
and works in a schema of its own (``schema``, also there), dropped afterwards, so tests never
see each other's tables and an external server (``POSTGRES_DSN``) is left as it was found. Tests that
restart or kill the server need one they own (``own_server``): a container when Docker
answers, else an embedded server; with ``POSTGRES_DSN`` set they are skipped, saying why.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from connectors.postgres import PostgresSinkConfig
from connectors.stage import ArrowPartition
from connectors.stage._rows import HASH_COLUMN
from connectors.testing.postgres import DEFAULT_MAX_PREPARED_TRANSACTIONS, start_postgres_server

Conn = psycopg.Connection[tuple[Any, ...]]


@pytest.fixture
def make_cfg(postgres_dsn: str, schema: str) -> Callable[..., PostgresSinkConfig]:
    """Factory of sink configs writing to table ``t`` of the test's schema."""

    def make(dsn: str | None = None, **kwargs: Any) -> PostgresSinkConfig:
        args: dict[str, Any] = {
            "dsn": dsn or postgres_dsn,
            "table": "t",
            "schema": schema,
            "sink_id": f"{schema}-sink",
            "control_schema": schema,
        }
        args.update(kwargs)
        return PostgresSinkConfig.build(**args)

    return make


def _own_server(max_prepared_transactions: int, why: str) -> Iterator[Any]:
    if os.environ.get("POSTGRES_DSN"):
        pytest.skip(f"{why}: needs a server the test owns, and POSTGRES_DSN names an external one")
    with start_postgres_server(max_prepared_transactions=max_prepared_transactions) as server:
        yield server


@pytest.fixture
def own_server() -> Iterator[Any]:
    """A server this test may restart and kill (container or embedded), stopped after."""
    yield from _own_server(DEFAULT_MAX_PREPARED_TRANSACTIONS, "restarts or kills the server")


@pytest.fixture
def own_server_without_2pc() -> Iterator[Any]:
    """A server with ``max_prepared_transactions = 0`` (container or embedded)."""
    yield from _own_server(0, "needs prepared transactions disabled")


def arrow_rows(batches: list[pa.RecordBatch]) -> ArrowPartition:
    """The rows of one write task, as the stage hands them to a participant."""
    return ArrowPartition(batches)


def with_hash(columns: dict[str, pa.Array]) -> pa.RecordBatch:
    """A batch of ``columns`` plus a deterministic ``_eos_hash`` column (row content hash)."""
    n = len(next(iter(columns.values())))
    table = pa.table(columns)
    hashes = [
        int.from_bytes(
            hashlib.blake2b(
                repr([c[i].as_py() for c in table.columns]).encode(), digest_size=8
            ).digest(),
            "big",
            signed=True,
        )
        for i in range(n)
    ]
    return pa.record_batch({**columns, HASH_COLUMN: pa.array(hashes, pa.int64())})
