"""The demo application: ``python -m connectors.demo`` (console script ``eos-demo``).

It runs the kit's main job on the embedded default (minikafka + local Spark): a
``kafka-rc`` source read with ``read_committed``, ``KafkaSink`` exactly-once, optional
chaos, and the exactly-once checker (``connectors.verify``) over the result. Its streaming
query runs as a Spark application of its own, the harness :mod:`connectors.demo.app`
(which the chaos tests, the soak run and the benchmarks drive too). It is an application
built on the kit, not a connector: nothing in the connectors imports it.
"""

__all__: list[str] = []
