"""The test suite's own infrastructure: not part of the kit, not installed with it.

* :mod:`integration_tests.support.spark_cluster` - a standalone Spark cluster on loopback
  (or ``SPARK_MASTER_URL``) for the ``cluster`` tests;
* :mod:`integration_tests.support.spark_connect` - a Spark Connect server for the
  ``connect`` tests;
* :mod:`integration_tests.support.soak` - the long randomized run (``make soak``).

What users may import for their own tests stays in :mod:`connectors.testing` and
:mod:`txn.testing` (docs/testing.md).
"""
