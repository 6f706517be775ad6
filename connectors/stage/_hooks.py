"""Named points of the write stage where a test can inject a fault: the seam, and only it.

The stage calls a :class:`StepHooks` object at every step of the protocol, named by
``txn.TaskStep`` (in the write tasks) and ``txn.CoordinatorStep`` (on the driver): one set
of names, whose values (``"after_open"``, ``"mid_write"``, ``"driver_after_plan"``...) a
fault plan file uses. No option of a sink carries hooks: in production none is installed
and the stage calls nothing.

The seam is process-wide, scoped by sink id: :func:`install` sets the hooks of this
process for one sink id, or for every sink (tests do it through
``connectors.testing.inject_faults``; nothing else calls it), and the stage reads the ones
of its own sink id with :func:`installed`. Several queries in one application (each with
its own sink id) can so run with a fault plan each, none firing in another's epochs:

* on the driver, at each ``txn.CoordinatorStep`` of an epoch (the process that runs the
  ``foreachBatch`` call: the application's driver, or a Spark Connect server's
  ``foreachBatch`` process);
* when it builds the epoch's write tasks: the hooks installed then travel to the Python
  workers inside the pickled task spec (``_task.TaskSpec.hooks``), so they must be
  picklable and cheap to call when nothing is planned. A worker never reads its own
  process's hooks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from txn import CoordinatorStep, TaskStep

# The step names a fault plan may use, in protocol order: every step of either side.
TASK_STEPS = tuple(step.value for step in TaskStep)
DRIVER_STEPS = tuple(step.value for step in CoordinatorStep)


@runtime_checkable
class StepHooks(Protocol):
    """Fault injection at named steps (testing only)."""

    def fire(
        self, step: TaskStep | CoordinatorStep, epoch: int, partition: int | None = None
    ) -> None:
        """Act at ``step`` of ``epoch`` (``partition`` None on the driver)."""

    def interrupt_write(self, epoch: int, partition: int) -> tuple[int, Callable[[], None]] | None:
        """Return ``(rows, callback)`` to call ``callback`` once ``rows`` rows were written."""


# The installed hooks by sink id; the key None holds the ones for every sink.
_installed: dict[str | None, StepHooks] = {}


def install(hooks: StepHooks | None, *, sink_id: str | None = None) -> StepHooks | None:
    """Make ``hooks`` the step hooks of ``sink_id`` (None: of every sink); return the old ones.

    ``hooks`` None removes them. Testing only (``connectors.testing.inject_faults``). Not
    thread-local: the sinks concerned see them from their next epoch step on.

    Raises:
        TypeError: ``hooks`` does not implement :class:`StepHooks`.

    """
    if hooks is not None and not isinstance(hooks, StepHooks):
        msg = f"step hooks must implement connectors.stage.StepHooks, got {type(hooks).__name__}"
        raise TypeError(msg)
    previous = _installed.pop(sink_id, None)
    if hooks is not None:
        _installed[sink_id] = hooks
    return previous


def installed(sink_id: str) -> StepHooks | None:
    """Return the step hooks of sink ``sink_id``: its own, else every sink's (None in production)."""
    return _installed.get(sink_id, _installed.get(None))
