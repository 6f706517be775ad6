"""An exactly-once SQLite sink: the worked example of docs/writing-a-db-connector.md.

Small on purpose (a few short modules on the standard library's ``sqlite3``) and
complete on purpose: it is tested like the kit's own connectors, through Spark and under
the txn core's crash matrix (``txn.testing``). It takes the idempotency-table approach
("commit in the task"):

* each write task writes its partition's rows and the partition's marker row
  ``(sink_id, write_partition, epoch, row_count, checksum)`` of table ``eos_markers`` in
  one local transaction, and commits it itself;
* a replayed epoch skips the partitions whose marker covers it and rewrites the others
  (redo-or-skip; the protocol: docs/architecture.md, section 2).

**Unaligned mode only.** SQLite has one write lock per database, held by a transaction from
its first write to its commit. In aligned mode each partition's transaction stays open until
every partition has voted, so the second partition waits for the first one's lock while the
first waits for the second one's vote: a deadlock that ends as ``database is locked`` after
the busy timeout. :class:`SqliteSinkConfig` refuses it with :class:`SqliteCode.ALIGNED_MODE`.

Where it runs: the driver and every executor must reach the database file at the same path
(local mode, or one machine); SQLite on a network file system is not reliable. Writable
Spark types: integers, floats, strings, booleans, binary. Usage::

    sink = SqliteSink("/data/app.db", "orders", sink_id="orders-sqlite")
    df.writeStream.foreachBatch(sink).option("checkpointLocation", ck).start()
"""

from connectors.examples.sqlite._config import SqliteSinkConfig
from connectors.examples.sqlite._database import prepare_database, read_markers
from connectors.examples.sqlite._errors import SqliteCode, SqliteSinkError, classify
from connectors.examples.sqlite._participant import SqliteResource
from connectors.examples.sqlite._sink import SqliteConnector, SqliteSink

__all__ = [
    "classify",
    "prepare_database",
    "read_markers",
    "SqliteCode",
    "SqliteConnector",
    "SqliteResource",
    "SqliteSink",
    "SqliteSinkConfig",
    "SqliteSinkError",
]
