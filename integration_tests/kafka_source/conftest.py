from __future__ import annotations

from typing import Any

import pytest

from connectors.kafka import register


@pytest.fixture(scope="module")
def rc_spark(spark: Any) -> Any:
    """The session's SparkSession with the kafka-rc format registered."""
    register(spark)
    return spark
