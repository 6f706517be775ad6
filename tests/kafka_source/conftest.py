"""The unit tests of the source's Spark classes need the PySpark they are built on.

On PySpark older than the source needs (``make test-compat``), the modules that import
those classes are not collected; the others (options, Arrow, the version error) run.
"""

from collections.abc import Iterator

import pytest

from connectors.kafka._source import spark_has_source_api
from connectors.kafka._source._consumers import close_idle

collect_ignore = (
    []
    if spark_has_source_api()
    else [
        "test_offsets_ranges.py",
        "test_outages.py",
        "test_source_options.py",
    ]
)


@pytest.fixture(autouse=True)
def _no_idle_consumers() -> Iterator[None]:
    """Every test starts and ends without consumers kept by an earlier read (``_consumers``)."""
    close_idle()
    yield
    close_idle()
