"""Connectors of the kit, one package per concept.

* :mod:`connectors.kafka` - the exactly-once Kafka sink for ``foreachBatch``
  (:class:`connectors.kafka.KafkaSink`), its Kafka epoch log and marker reader;
* the other packages (source, verification, demo, ...) document themselves.

Import from the subpackages; this package re-exports nothing.
"""

__all__: list[str] = []
