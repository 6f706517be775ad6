"""The end-to-end tests' producer strategy: the pooled one in ``make test``, both in ``make soak``.

Each e2e chaos scenario runs whole Spark applications (minutes of CPU on a 2-core CI
machine). The reference strategy (a new producer per task) keeps the same invariants under
the same faults as the pooled one; ``make test`` proves it on the real-Kafka crash matrix
(``integration_tests/kafka_sink/test_ksink_it_crash_matrix.py``), the recovery tests and
``test_ksink_it_strategies.py``, which run both strategies. The e2e scenarios run it again
under the ``soak`` marker (``make soak``, option ``--soak``): a duplicate of what ``make test`` covers, not a
gap in it.
"""

from __future__ import annotations

import pytest


@pytest.fixture(
    params=[
        pytest.param("pooled", id="pooled"),
        pytest.param("reference", id="reference", marks=pytest.mark.soak),
    ]
)
def producer_strategy(request: pytest.FixtureRequest) -> str:
    """Override of ``integration_tests/conftest.py``'s fixture: the reference run is ``soak``."""
    return str(request.param)
