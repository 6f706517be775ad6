"""Example connectors: complete, small, tested, written to be read and copied.

* :mod:`connectors.examples.sqlite` - an exactly-once sink on the standard library's
  ``sqlite3`` (unaligned mode, the idempotency-table approach), the worked example of
  docs/writing-a-db-connector.md.

Each example is a module of its own, imported by its full name (``from
connectors.examples.sqlite import SqliteSink``), so this package pulls in nothing.
"""

__all__: list[str] = []
