"""Exactly-once PostgreSQL sink on the ``txn`` core and the generic Spark stage (psycopg 3).

* :class:`PostgresSink` - the ``foreachBatch`` sink (append, upsert, changelog);

* :class:`PostgresSinkConfig` - validated options (no network I/O at construction);
* :func:`prepare_resource` / :class:`PostgresResource` - the ``txn.Resource``: two-phase
  commit (PREPARE TRANSACTION, COMMIT PREPARED from the coordinator) when the server
  allows it, else the idempotency table; :class:`PostgresParticipant` writes a partition;
* :func:`describe_table` / :func:`check_input` / :class:`TableLayout` - target introspection
  and the input check (errors name the column); ``create_table`` / ``evolve_schema``: the
  table created or evolved from the input (``_ddl``);
* :class:`BulkWriter` - COPY (CSV from Arrow) and one merge statement per task;
* :class:`PostgresEpochLog` - the epoch log in a table of the same database;
* :func:`read_markers`, :func:`list_prepared` - the sink's state, for checkers;
* :func:`classify` - the one SQLSTATE classifier; the error hierarchy rooted at
  :class:`PostgresSinkError` (a ``txn.TxnError``).

User page: docs/postgres-sink.md; how it is built (and how to write another database
connector): docs/writing-a-db-connector.md; the protocol: docs/architecture.md.

Needs psycopg, the ``postgres`` extra (``pip install 'spark-kafka-eos[postgres]'``);
without it this import raises ``MissingExtraError`` saying so.
"""

from connectors._extras import require

require("psycopg", extra="postgres", needed_for="the PostgreSQL sink (connectors.postgres)")

# The imports below need psycopg, checked above.
from connectors.postgres._classify import classify
from connectors.postgres._config import CommitProtocol, PostgresSinkConfig, WriteMode
from connectors.postgres._epoch_log import PostgresEpochLog
from connectors.postgres._errors import PostgresCode, PostgresSinkError
from connectors.postgres._markers import read_markers
from connectors.postgres._sink import PostgresConnector, PostgresSink

__all__ = [
    "classify",
    "read_markers",
    "CommitProtocol",
    "PostgresCode",
    "PostgresConnector",
    "PostgresEpochLog",
    "PostgresSink",
    "PostgresSinkConfig",
    "PostgresSinkError",
    "WriteMode",
]
