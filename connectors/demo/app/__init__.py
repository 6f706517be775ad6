"""The demo's application harness: the kit's streaming query, runnable as its own Spark app.

Part of the demo (an application, not a testing helper). Used by the demo (``python -m connectors.demo``), the end-to-end chaos tests, the soak run
and the benchmarks: input topics cut into chunk files, the query itself
(input -> ``KafkaSink``, ``PostgresSink``, or both in one epoch), the PostgreSQL table it
writes, and running it as a separate Spark application
(``python -m connectors.demo.app CONFIG``) that a test can kill.
"""

from connectors.demo.app._config import EpochLine, PipelineConfig, PipelineConfigError
from connectors.demo.app._pipeline import make_spark, run_query
from connectors.demo.app._runner import AppProcess

__all__ = [
    "AppProcess",
    "EpochLine",
    "PipelineConfig",
    "PipelineConfigError",
    "make_spark",
    "run_query",
]
