"""The kit's metrics in the Prometheus exposition format (the ``prometheus`` extra).

``PrometheusCollector(sink, ..., listener=..., async_metrics=...)`` adds up the sinks'
per-epoch metrics and reads the sources' lag and the async I/O counters, in its own
``CollectorRegistry``; :class:`MetricsServer` serves it over HTTP on the driver and
:class:`PushGatewayExporter` pushes it to a push gateway (short jobs). Needs
``prometheus_client``: ``pip install 'spark-kafka-eos[prometheus]'`` (importing this
package without it raises :class:`~connectors._extras.MissingExtraError`). How to enable
it, the metrics and example alert rules: docs/operations.md, "Prometheus metrics".
"""

from connectors._extras import require

require("prometheus_client", extra="prometheus", needed_for="connectors.prometheus")

from connectors.prometheus._collector import PrometheusCollector
from connectors.prometheus._errors import MetricsConfigError, MetricsPushError
from connectors.prometheus._push import PushGatewayExporter
from connectors.prometheus._server import MetricsServer

__all__ = [
    "MetricsConfigError",
    "MetricsPushError",
    "MetricsServer",
    "PrometheusCollector",
    "PushGatewayExporter",
]
