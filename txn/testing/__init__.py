"""Testing doubles of the 2PC core and its crash matrix, for connector authors.

Public so that connector authors test their code against the protocol the way the kit
does:

* an in-memory external system (:class:`MemoryStore`) and participants of both kinds
  (:class:`CommitInTaskResource`, :class:`PreparedResource`), also served to Spark's
  Python workers (:func:`serve_store`);
* the crash matrix: :class:`Crash` (a crash point), :data:`CASES` and
  :func:`crash_params` / :func:`crash_cases` (every protocol step, both commit modes, per
  participant kind), :class:`CrashWorld` (a connector's durable state and a driver that
  crashes and restarts over it; subclass it for your resource) and :func:`run_crash_case`
  (run one case, assert exactly-once); :class:`MemoryWorld` is the core's own world;
* epoch shapes (:data:`SHAPES`: full, every other epoch empty, one row per epoch) and
  :class:`Loss` (prepared work rolled back by hand after the commit decision).

How a database connector runs the matrix: docs/writing-a-db-connector.md. Nothing in
``txn`` outside this package imports it; pytest is needed by :func:`crash_params` only.
"""

from txn.testing._crash import (
    CASES,
    KAFKA_LIKE,
    KINDS,
    MIXED,
    PG_LIKE,
    SHAPES,
    Crash,
    CrashCase,
    CrashWorld,
    SimulatedCrash,
    crash_cases,
    crash_params,
    run_crash_case,
)
from txn.testing._memworld import MemoryWorld, epoch_rows
from txn.testing._participants import CommitInTaskResource, PreparedResource, Store, read_rows
from txn.testing._remote import RemoteStore, serve_store
from txn.testing._store import MemoryStore

__all__ = [
    "CASES",
    "KAFKA_LIKE",
    "KINDS",
    "MIXED",
    "PG_LIKE",
    "SHAPES",
    "CommitInTaskResource",
    "Crash",
    "CrashCase",
    "CrashWorld",
    "MemoryStore",
    "MemoryWorld",
    "PreparedResource",
    "RemoteStore",
    "SimulatedCrash",
    "Store",
    "crash_cases",
    "crash_params",
    "epoch_rows",
    "read_rows",
    "run_crash_case",
    "serve_store",
]
