"""The operations CLI of the kit: ``eos`` (``python -m connectors.ops``).

Commands (``eos COMMAND --help`` for the options; docs/operations.md for the runbook):

* ``status SINK_ID``: the epoch log (complete, in doubt, plans, the bound query), the
  markers per write partition, and per output partition how far the last stable offset
  lags the high watermark (an open transaction), optionally the open transactions found
  by a raw scan; of a PostgreSQL sink (``--dsn``) its prepared transactions, of a
  ``CompositeSink`` (``--member KIND:ID``) every member's;
* ``abort-lingering SINK_ID``: abort the open transactions of the sink's transactional ids,
  finish a PostgreSQL sink's prepared transactions as its log decided (``--dry-run``
  lists them);
* ``preflight``: the broker answers, topics exist, the transaction timeout fits the
  broker's maximum, and the ids and groups a sink will use;
* ``verify``: the exactly-once checker over an input and an output topic, or a table
  (``--table``);
* ``reset SINK_ID``: the explicit start-over of a sink whose query got a new checkpoint.

Output is rich tables by default, one JSON document with ``--json``. Exit codes
(:data:`EXIT_CODES`, also in every command's ``--help``): 0 done / healthy (the sink's log
was read), 1 a check found a problem (anomalies, an epoch in doubt, a failed preflight), 2
bad arguments (or records that do not fit ``verify``'s identity options), 3 the cluster or
the epoch log could not be read, or the log holds no record of the sink id
(:class:`UnknownSinkError`), 4 the command was refused (a reset with an epoch in doubt; a
PostgreSQL epoch log a running sink holds; a connection string as ``--epoch-log``,
:class:`UnreadableLogError`). A command never reports health or success for a log it did
not read.

One parser (``_parser``) and one dispatch (``_commands.COMMANDS``): each command runs once
for a sink of any connector, on its epoch log and its sides (``_target``: which log a
command reads), asking each side's connector through its admin interface (``_kafka``,
``_postgres``).

An application of the kit (``verify`` runs the checker, :mod:`connectors.verify`), not a
connector.
"""

from connectors.ops._cli import main
from connectors.ops._errors import UnknownSinkError, UnreadableLogError
from connectors.ops._result import EXIT_CODES

__all__ = ["EXIT_CODES", "UnknownSinkError", "UnreadableLogError", "main"]
