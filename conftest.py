"""Options of the whole suite.

pytest reads ``pytest_addoption`` only from the root conftest (and plugins), so the
options live here, whichever test directory a run names.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

# Property tests state what holds, never how fast (speed lives in benchmarks): no deadline per
# example. Hypothesis's default of 200 ms failed tests/kafka_source/test_offsets_ranges.py on
# a loaded machine (365 ms for one example), a failure that says nothing about the code.
settings.register_profile("kit", deadline=None)
settings.load_profile("kit")

# The long runs that an option turns on: marker -> (option, why the test is skipped without it).
OPT_IN_RUNS = {
    "fuzz": (
        "--fuzz",
        "long fuzz run of minikafka: select it with --fuzz (MINIKAFKA_FUZZ_SECONDS sets its length)",
    ),
    "model_long": (
        "--model-long",
        "long run of the model-based test: select it with --model-long (make model-long)",
    ),
    "soak": (
        "--soak",
        "a longer duplicate of a scenario make test covers: select it with --soak (make soak)",
    ),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    """Declare ``--fuzz``, ``--model-long`` and ``--soak``."""
    parser.addoption(
        "--fuzz",
        action="store_true",
        default=False,
        help="run the long fuzz run of minikafka's request decoding (tests marked fuzz)",
    )
    parser.addoption(
        "--model-long",
        action="store_true",
        default=False,
        help="run the long run of the model-based test of ordinary use (tests marked model_long)",
    )
    parser.addoption(
        "--soak",
        action="store_true",
        default=False,
        help="run the longer duplicates of scenarios make test covers (tests marked soak)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the tests of each opt-in run unless its option is given."""
    for marker, (option, reason) in OPT_IN_RUNS.items():
        if config.getoption(option):
            continue
        for item in items:
            if item.get_closest_marker(marker) is not None:
                item.add_marker(pytest.mark.skip(reason=reason))
