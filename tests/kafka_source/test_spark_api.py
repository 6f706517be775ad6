"""The source's version error: what it says, and that it crosses a process boundary intact."""

from __future__ import annotations

import pickle

from connectors.kafka import MINIMUM_SPARK, KafkaSourceError, SparkVersionError


def test_the_version_error_names_both_versions_and_survives_pickling() -> None:
    error = SparkVersionError("3.5.9", MINIMUM_SPARK)
    assert "installed PySpark is 3.5.9" in str(error)
    assert f"pip install 'pyspark>={MINIMUM_SPARK}'" in str(error)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.installed, copy.minimum, str(copy)) == ("3.5.9", MINIMUM_SPARK, str(error))
    assert isinstance(copy, KafkaSourceError) and isinstance(copy, ImportError)
