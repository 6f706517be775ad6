"""Connectors of the kit, one package per concept.

* :mod:`connectors.kafka` - the exactly-once Kafka sink for ``foreachBatch``
  (:class:`connectors.kafka.KafkaSink`), its Kafka epoch log and marker reader;
* the other packages (source, verification, demo, ...) document themselves.

Import from the subpackages; this package re-exports nothing but the version.
"""

__version__ = "0.2.0.dev0"
"""The kit's version: the one place it is written (pyproject.toml reads it; CHANGELOG.md)."""

__all__ = ["__version__"]
