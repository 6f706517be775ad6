"""connectors._worker_heap: a worker's heap is frozen once, and collections then skip it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from connectors import _worker_heap


@pytest.fixture
def fresh_process_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # This test process stands in for a Python worker: undo the freeze afterwards.
    monkeypatch.setattr(_worker_heap, "_frozen", False)
    gc.unfreeze()
    yield
    gc.unfreeze()


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


def test_the_first_call_freezes_what_lives_now_and_later_calls_do_nothing(fresh_process_state):
    before = len(gc.get_objects())
    _worker_heap.freeze_worker_heap()
    frozen = gc.get_freeze_count()
    assert frozen >= before // 2  # the modules, classes and functions alive now
    assert len(gc.get_objects()) < before // 10  # what a collection still walks

    Node()  # garbage made after the freeze
    _worker_heap.freeze_worker_heap()
    assert gc.get_freeze_count() == frozen  # not frozen again
    assert gc.collect() >= 1  # later garbage is collected as before


def test_without_the_freeze_a_collection_walks_the_whole_heap(fresh_process_state):
    # The reference: what PySpark's per-task gc.collect() walks when nothing was frozen.
    assert gc.get_freeze_count() == 0
    assert len(gc.get_objects()) > 10_000
