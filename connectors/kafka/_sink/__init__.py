"""The Kafka connector's sink (public through :mod:`connectors.kafka`)."""
