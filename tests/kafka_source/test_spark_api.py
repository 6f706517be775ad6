"""The source's version error: what it says, and that it crosses a process boundary intact."""

from __future__ import annotations

import pickle

from connectors.kafka import MINIMUM_SPARK, KafkaCode, KafkaConnectorError
from connectors.kafka._source._spark_api import spark_version_error


def test_the_version_error_names_both_versions_and_survives_pickling() -> None:
    error = spark_version_error("3.5.9")
    assert "installed PySpark is 3.5.9" in str(error)
    assert f"pip install 'pyspark>={MINIMUM_SPARK}'" in str(error)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.code, str(copy)) == (KafkaCode.SPARK_VERSION, str(error))
    assert isinstance(copy, KafkaConnectorError) and not copy.retry_stage
