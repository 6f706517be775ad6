"""The unit tests of the source's Spark classes need the PySpark they are built on.

On PySpark older than the source needs (``make test-compat``), the modules that import
those classes are not collected; the others (options, Arrow, the version error) run.
"""

from connectors.kafka._source import spark_has_source_api

collect_ignore = (
    []
    if spark_has_source_api()
    else [
        "test_offsets_ranges.py",
        "test_outages.py",
        "test_source_options.py",
    ]
)
