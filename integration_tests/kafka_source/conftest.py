"""Integration tests of the source whose modules import its Spark classes need PySpark 4.2.

On older PySpark (``make test-compat``) those modules are not collected; the rest of the
directory runs (``rc_spark`` skips a test that reads through Spark, saying why).
"""

from connectors.kafka._source import spark_has_source_api

collect_ignore = [] if spark_has_source_api() else ["test_options_parity.py"]
