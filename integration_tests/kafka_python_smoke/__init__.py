"""Smoke tests of the Kafka endpoint with kafka-python, a client independent of librdkafka."""
