"""Testing doubles of the 2PC core: an in-memory external system and participants of both kinds.

Public so that connector authors can test their code against the protocol the way the kit
does (``tests/txn``), also through Spark (``serve_store``: the store served to Spark's
Python workers). Nothing in ``txn`` outside this package imports it.
"""

from txn.testing._participants import (
    CommitInTaskResource,
    Decode,
    MemRows,
    OnePassRows,
    PreparedResource,
    Store,
    gid,
    partition_rows,
    read_rows,
    summarize_rows,
)
from txn.testing._remote import RemoteStore, serve_store
from txn.testing._store import Commit, FencedError, MemoryStore


class SimulatedCrash(BaseException):  # noqa: N818 - it is a crash, not an error
    """Raised by crash hooks: the process "dies" here, no cleanup code runs.

    A BaseException (not an Exception) so that ``except Exception`` blocks in the protocol
    do not treat it as an ordinary failure and abort on its behalf.
    """


__all__ = [
    "Commit",
    "CommitInTaskResource",
    "Decode",
    "FencedError",
    "MemRows",
    "MemoryStore",
    "OnePassRows",
    "PreparedResource",
    "RemoteStore",
    "SimulatedCrash",
    "Store",
    "gid",
    "partition_rows",
    "read_rows",
    "serve_store",
    "summarize_rows",
]
