"""Kafka semantics conformance suite: must pass unchanged against real Apache Kafka 2.5+."""
