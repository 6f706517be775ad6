"""The stage's epoch log defers a commit-in-task epoch's completion to the next write.

docs/architecture.md, section 2, "Deferred completion": the sink object sees the epoch
committed at once; the durable log gets the completion with the next plan, at ``close()``
and when another sink object of the same id takes the log over. Real Spark (local mode),
the in-memory participants of ``txn.testing`` served to the Python workers, the file log.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from connectors.stage import TransactionalSink
from integration_tests.stage.test_generic_stage import assert_exactly_once, batch, make_sink
from txn import CommitMode, EpochState, FileEpochLog, Guarantee
from txn.testing import MemoryStore, serve_store

pytestmark = pytest.mark.spark


@pytest.fixture
def served() -> Iterator[tuple[MemoryStore, Any]]:
    with serve_store() as pair:
        yield pair


def _durable(tmp_path: Path, sink: TransactionalSink) -> Any:
    return FileEpochLog(tmp_path / "epochs.log", sink_id=sink.sink_id, read_only=True).load()


@pytest.mark.parametrize("mode", [CommitMode.ALIGNED, CommitMode.UNALIGNED], ids=lambda m: m.value)
def test_the_last_completion_is_durable_after_close_and_a_take_over(
    spark: Any, tmp_path: Path, served: Any, closing: Any, mode: CommitMode
) -> None:
    store, handle = served
    sink = closing(make_sink(tmp_path, handle, "commit-in-task", mode))
    for epoch in range(2):
        assert sink(batch(spark, epoch), epoch).committed
        assert sink.epoch_log_history().is_committed(epoch)  # the sink's own view
        durable = _durable(tmp_path, sink)
        assert durable.state(epoch) is EpochState.PLANNED  # completion held back
        assert epoch == 0 or durable.is_committed(epoch - 1)  # written with this plan
    assert [m.epoch_log_appends for m in sink.metrics()] == [1, 2]  # records made durable
    # A new sink object of the same id takes the log over: the old one writes its completion.
    again = closing(TransactionalSink(sink.connector))
    assert again(batch(spark, 1), 1).skipped  # Spark's replay of the last batch
    assert _durable(tmp_path, sink).is_committed(1)
    assert again(batch(spark, 2), 2).committed
    again.close()
    durable = _durable(tmp_path, sink)
    assert [durable.state(e) for e in range(3)] == [EpochState.COMMITTED] * 3
    assert_exactly_once(store, 3)


@pytest.mark.parametrize("guarantee", [Guarantee.AT_LEAST_ONCE, Guarantee.EXACTLY_ONCE])
def test_what_is_not_deferred_is_durable_at_once(
    spark: Any, tmp_path: Path, served: Any, closing: Any, guarantee: Guarantee
) -> None:
    store, handle = served
    kind = "commit-in-task" if guarantee is Guarantee.AT_LEAST_ONCE else "prepared"
    sink = closing(make_sink(tmp_path, handle, kind, CommitMode.ALIGNED, guarantee=guarantee))
    assert sink(batch(spark, 0), 0).committed
    assert _durable(tmp_path, sink).is_committed(0)
    sink.close()
