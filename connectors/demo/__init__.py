"""The demo application: ``python -m connectors.demo`` (console script ``eos-demo``).

It runs the kit's main job on the embedded default (minikafka + local Spark): a
``kafka-rc`` source read with ``read_committed``, ``KafkaSink`` exactly-once, optional
chaos, and the exactly-once checker over the result. It is an application built on the
kit and its testing helpers (``connectors.demo.app``), not a connector: nothing in the
connectors imports it.
"""

__all__: list[str] = []
