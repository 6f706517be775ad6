"""PostgresSinkConfig validation (no network I/O), fingerprint, pickling, protocol choice."""

from __future__ import annotations

import pickle

import pytest

from connectors.postgres import (
    CommitProtocol,
    PostgresCode,
    PostgresSinkConfig,
    PostgresSinkError,
    WriteMode,
)
from connectors.postgres._resource import choose_two_phase
from txn import Guarantee, TxnCode, has_code

# A DSN pointing at a port nothing listens on: construction must not connect.
DSN = "host=127.0.0.1 port=1 dbname=nowhere connect_timeout=1"


def build(**kwargs: object) -> PostgresSinkConfig:
    args: dict[str, object] = {"dsn": DSN, "table": "t", "sink_id": "s1", **kwargs}
    return PostgresSinkConfig.build(**args)  # type: ignore[arg-type]


def test_defaults_and_enum_parsing_without_connecting() -> None:
    cfg = build(
        write_mode="upsert",
        key_columns=["id"],
        commit_protocol="two-phase",
        guarantee="at-least-once",
    )
    assert cfg.write_mode is WriteMode.UPSERT and cfg.key_columns == ("id",)
    assert cfg.commit_protocol is CommitProtocol.TWO_PHASE
    assert cfg.guarantee is Guarantee.AT_LEAST_ONCE and not cfg.transactional
    assert build().schema == "public" and build().control_schema == "eos"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sink_id": "has space"}, "sink_id"),
        ({"sink_id": "a:b"}, "sink_id"),
        ({"sink_id": "x" * 65}, "sink_id"),
        ({"dsn": "host=a port"}, "dsn"),
        ({"dsn": 5}, "dsn"),
        ({"table": ""}, "table"),
        ({"table": "t" * 64}, "63-byte"),
        ({"schema": "a\0b"}, "schema"),
        ({"write_mode": "merge"}, "write_mode must be one of: append, upsert, changelog"),
        ({"commit_protocol": "3pc"}, "commit_protocol"),
        ({"guarantee": "maybe"}, "guarantee"),
        ({"key_columns": ["id"]}, "only used by write_mode"),
        ({"write_mode": "upsert", "key_columns": "id"}, "sequence of column names"),
        ({"write_mode": "upsert", "key_columns": ["a", "a"]}, "twice"),
        ({"connect_timeout_s": 0}, "connect_timeout_s"),
        ({"lock_timeout_ms": True}, "lock_timeout_ms"),
    ],
)
def test_bad_options_raise_a_config_error_naming_the_option(
    kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(
        PostgresSinkError, match=match, check=lambda e: e.code is TxnCode.CONFIG
    ) as info:
        build(**kwargs)
    assert has_code(info.value, TxnCode.CONFIG) and not info.value.retry_stage


def test_fingerprint_covers_what_rows_do_to_the_table() -> None:
    base = build(write_mode="upsert", key_columns=["id"])
    assert base.fingerprint() == build(write_mode="upsert", key_columns=["id"]).fingerprint()
    changed = [
        build(write_mode="upsert", key_columns=["id", "k"]),
        build(write_mode="append"),
        build(write_mode="upsert", key_columns=["id"], table="u"),
        build(write_mode="upsert", key_columns=["id"], schema="other"),
    ]
    assert len({base.fingerprint(), *(c.fingerprint() for c in changed)}) == 5
    # Neither the DSN (where the server is) nor the commit protocol changes where rows land.
    same = build(
        write_mode="upsert",
        key_columns=["id"],
        dsn="host=elsewhere",
        commit_protocol="idempotency-table",
    )
    assert same.fingerprint() == base.fingerprint()


def test_config_pickles() -> None:
    cfg = build(write_mode="changelog", key_columns=["id"], op_column="kind")
    assert pickle.loads(pickle.dumps(cfg)) == cfg


@pytest.mark.parametrize(
    ("protocol", "slots", "two_phase"),
    [
        ("auto", 0, False),
        ("auto", 10, True),
        ("idempotency-table", 10, False),
        ("two-phase", 10, True),
    ],
)
def test_protocol_choice(protocol: str, slots: int, two_phase: bool) -> None:
    assert choose_two_phase(build(commit_protocol=protocol), slots) is two_phase


def test_forcing_two_phase_without_slots_is_refused_with_the_fix() -> None:
    with pytest.raises(
        PostgresSinkError,
        match="max_prepared_transactions",
        check=lambda e: e.code is PostgresCode.TWO_PHASE_UNAVAILABLE,
    ):
        choose_two_phase(build(commit_protocol="two-phase"), 0)


def test_resource_pickles_and_knows_who_completes_prepared_work() -> None:
    from connectors.postgres._resource import PostgresResource
    from connectors.postgres._schema import TableLayout

    layout = TableLayout(
        schema="public",
        table="t",
        write_mode=WriteMode.APPEND,
        columns=(("id", "bigint"),),
        arrow_types=("int64",),
    )
    two_phase = PostgresResource(cfg=build(), two_phase=True).with_layout(layout)
    back = pickle.loads(pickle.dumps(two_phase))
    assert back == two_phase and back.layout == layout and back.completable_by_coordinator
    assert not PostgresResource(cfg=build(), two_phase=False).completable_by_coordinator
    # Without exactly-once no task prepares anything, whatever the server allows.
    assert not PostgresResource(
        cfg=build(guarantee="at-least-once"), two_phase=True
    ).completable_by_coordinator
