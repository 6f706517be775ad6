"""Result queues that decide the order in which completed requests leave the operator.

Both queues hold the requests of one input Arrow batch. The operator drains a queue
completely before it reads the next input batch, so the end of a batch is a fence that
no result crosses in either mode (the role watermarks play in Flink's unordered mode).

Contract shared by both queues:
    1. ``put(entry)`` registers a started request; entries are put in input order.
    2. ``complete(entry)`` marks it finished (called from the request's done-callback,
       hence in completion order); each entry is completed exactly once.
    3. ``pop_ready()`` returns the entries allowed to leave now, in leaving order, and
       forgets them; every entry is returned exactly once.
    4. ``len(queue)`` counts entries put and not yet popped.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")


class ResultQueue(Protocol[T]):
    """The interface of both queues (see the module docstring for the contract)."""

    def put(self, entry: T) -> None:
        """Register a started request."""

    def complete(self, entry: T) -> None:
        """Mark a registered request finished."""

    def pop_ready(self) -> list[T]:
        """Remove and return the entries that may leave now, in leaving order."""

    def __len__(self) -> int:
        """Entries put and not yet popped."""


class OrderedResultQueue(Generic[T]):
    """Entries leave in the order they were put: a finished entry waits for all before it."""

    def __init__(self) -> None:
        self._entries: deque[T] = deque()
        self._done: set[int] = set()

    def put(self, entry: T) -> None:
        """Append a started request at the tail."""
        self._entries.append(entry)

    def complete(self, entry: T) -> None:
        """Mark ``entry`` finished; it leaves once every earlier entry has left."""
        self._done.add(id(entry))

    def pop_ready(self) -> list[T]:
        """Pop the finished prefix of the queue."""
        ready: list[T] = []
        while self._entries and id(self._entries[0]) in self._done:
            entry = self._entries.popleft()
            self._done.discard(id(entry))
            ready.append(entry)
        return ready

    def __len__(self) -> int:
        return len(self._entries)


class UnorderedResultQueue(Generic[T]):
    """Entries leave in the order they finished."""

    def __init__(self) -> None:
        self._pending: dict[int, T] = {}
        self._finished: list[T] = []

    def put(self, entry: T) -> None:
        """Register a started request."""
        self._pending[id(entry)] = entry

    def complete(self, entry: T) -> None:
        """Move ``entry`` to the finished list, after those that finished earlier."""
        self._finished.append(self._pending.pop(id(entry)))

    def pop_ready(self) -> list[T]:
        """Pop every finished entry, in completion order."""
        ready, self._finished = self._finished, []
        return ready

    def __len__(self) -> int:
        return len(self._pending) + len(self._finished)
