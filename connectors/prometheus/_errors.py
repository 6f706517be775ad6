"""The Prometheus exporter's errors (docs/troubleshooting.md, "Prometheus metrics")."""

from __future__ import annotations


class MetricsConfigError(ValueError):
    """An exporter option is invalid (raised at construction, before any I/O)."""


class MetricsPushError(Exception):
    """The push gateway did not take the metrics (after the bounded retries)."""
