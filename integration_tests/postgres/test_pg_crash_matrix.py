"""The crash matrix of the txn core, run on the PostgreSQL resource and a real server.

Every case of the txn crash matrix (``txn.testing.crash_params``: coordinator and task
crashes at every protocol step, both commit modes), with "prepared" = two-phase commit
(PREPARE TRANSACTION, COMMIT PREPARED by the coordinator) and "commit-in-task" = the
idempotency table. Each case crashes during epoch 1 of 3, restarts the driver (new epoch
log handle, new resource, recover()) and replays; then every row is in the table exactly
once, nothing of the sink is left in pg_prepared_xacts, every partition's marker and the
log say every epoch committed, and (two-phase) no epoch was ever partly visible after a
recovery. Every case also runs with an empty epoch 1 (every write partition prepares or
commits an empty transaction with its marker).
"""

from __future__ import annotations

import pytest

from integration_tests.postgres._world import PgWorld
from txn import CommitMode
from txn.testing import KAFKA_LIKE, PG_LIKE, Crash, crash_params, run_crash_case
from txn.testing._crash import EMPTY, FULL


@pytest.mark.parametrize("shape", [FULL, EMPTY])
@pytest.mark.parametrize(("kind", "mode", "crash"), crash_params((KAFKA_LIKE, PG_LIKE)))
def test_crash_recover_replay_is_exactly_once(
    postgres_dsn: str, schema: str, kind: str, mode: CommitMode, crash: Crash, shape: str
) -> None:
    world = PgWorld(lambda: postgres_dsn, schema, kind, mode=mode, shape=shape)
    world.create_table()
    run_crash_case(world, crash)
