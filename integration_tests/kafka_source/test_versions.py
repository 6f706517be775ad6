"""Which PySpark runs the ``kafka-rc`` source, proven on the installed one.

``make test-compat`` runs this on every supported Spark line: from PySpark 4.2 the source
registers; before, ``import connectors.kafka`` works (the sinks run there) and
``register`` raises ``KafkaCode.SPARK_VERSION`` naming the installed and the minimum version.
"""

from __future__ import annotations

from typing import Any

import pyspark
import pytest
from packaging.version import Version

import connectors.kafka
from connectors.kafka import MINIMUM_SPARK, SOURCE_NAME, KafkaCode, KafkaConnectorError, register
from connectors.kafka._source import spark_has_source_api

pytestmark = [pytest.mark.spark, pytest.mark.compat]


def test_the_source_api_is_there_exactly_from_the_minimum_version() -> None:
    installed = Version(pyspark.__version__).release[:2]
    assert spark_has_source_api() == (installed >= Version(MINIMUM_SPARK).release)


def test_register_works_or_names_the_installed_and_the_minimum_version(spark: Any) -> None:
    if spark_has_source_api():
        assert register(spark) == SOURCE_NAME
        assert "KafkaRcDataSource" in connectors.kafka.__all__
        assert connectors.kafka.KafkaRcDataSource.name() == SOURCE_NAME
        return
    with pytest.raises(
        KafkaConnectorError, check=lambda e: e.code is KafkaCode.SPARK_VERSION
    ) as info:
        register(spark)
    error = info.value  # the message names both versions (the error has no fields of its own)
    assert f"PySpark {MINIMUM_SPARK} or later" in str(error)
    assert f"installed PySpark is {pyspark.__version__}" in str(error)
    with pytest.raises(KafkaConnectorError, check=lambda e: e.code is KafkaCode.SPARK_VERSION):
        _ = connectors.kafka.KafkaRcDataSource
    # A star import leaves the class out instead of failing.
    assert "KafkaRcDataSource" not in connectors.kafka.__all__
