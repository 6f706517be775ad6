"""Fault injection for tests (TESTING ONLY; never inject a FaultPlan in production).

A :class:`FaultPlan` implements the stage's fault hooks (``connectors.stage.StepHooks``).
:func:`inject_faults` installs it in this process for a block: every sink built on
:mod:`connectors.stage` (``KafkaSink``, ``PostgresSink``, ...) whose epochs run in the
block fires it, on the driver and, carried with the epoch's write tasks, in the Python
workers. No sink option carries a plan::

    with inject_faults(FaultPlan(path)):
        query.processAllAvailable()  # or sink(df, epoch)

The block must hold the ``foreachBatch`` calls themselves: a query's batches run in its
driver process, so an application started in a process of its own installs the plan
there (``connectors.demo.app`` does, from ``PipelineConfig.fault_plan``).

A :class:`FaultPlan` names a JSON file holding a list of faults::

    [{"id": "k1", "step": "mid_write", "epoch": 3, "partition": 0,
      "action": "kill", "after_rows": 100, "times": 1},
     {"id": "s1", "step": "before_commit", "partition": 1, "action": "sleep", "seconds": 30},
     {"id": "w1", "step": "before_commit", "partition": 0, "action": "await",
      "waits_for": "s1", "seconds": 60}]

A step is named by its value in ``txn.TaskStep`` (the task side: ``after_open``,
``mid_write``, ``after_write``, ``after_pre_commit``, ``before_commit``, ``after_commit``,
``after_abort``) or ``txn.CoordinatorStep`` (the driver: ``driver_before_plan``, ``driver_after_plan``,
``driver_after_stage``, ``driver_before_complete``, ``driver_after_decision``,
``driver_after_partition_delivered``, ``driver_after_delivered``,
``driver_after_complete``; the decision and its delivery only for sinks the coordinator
completes, such as PostgreSQL in two-phase mode). ``epoch``/``partition`` null (or
absent) match any. A fault fires at most ``times`` times in total, across processes:
each firing first claims ``{path}.{id}.{n}`` with ``O_CREAT | O_EXCL``, so a retried
task does not die forever. Actions:

* ``kill``: SIGKILL the current process (the Python worker, or the driver for driver steps);
* ``raise``: raise ``InjectedFault``;
* ``sleep``: block the current process for ``seconds`` (> 0), then carry on; used to hold
  one task at a step while another one reaches its fault;
* ``await``: block until the fault named by ``waits_for`` (another fault of the same plan)
  has fired at least once, or ``seconds`` (> 0) passed, then carry on; used to order two
  tasks, e.g. "partition 0 commits only once partition 1 is held";
* ``kill_app``: SIGKILL the whole Spark application from inside it: the process group of
  the session leader (the driver Python process and its JVM), then the current process
  group (PySpark's worker daemon puts itself and its workers in a group of their own).
  This is only safe when the application runs in a session of its own, as
  ``connectors.demo.app.AppProcess`` starts it; otherwise it would kill the caller's terminal
  session. So a plan holding ``kill_app`` is refused at load (``FaultPlanError``) unless
  the environment variable ``FaultPlan.KILL_APP_ENV`` is ``"1"``: set it only in the
  environment of an application started in its own session (it reaches the driver, the
  JVM and the Python workers), never in a process that shares a session with anything else.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from connectors.stage import _hooks
from connectors.stage._hooks import DRIVER_STEPS, TASK_STEPS
from txn import ErrorCode, TaskStep, TxnCode, TxnError

ACTIONS = frozenset({"kill", "raise", "sleep", "await", "kill_app"})
# Actions that take ``seconds``: how long to sleep, or the longest wait of ``await``.
TIMED_ACTIONS = frozenset({"sleep", "await"})
# Seconds between checks of an ``await`` fault for the fault it waits for.
AWAIT_POLL_S = 0.05
# Environment variable that allows ``kill_app`` (value "1"); see the module docstring.
KILL_APP_ENV = "EOS_FAULT_APP_IN_OWN_SESSION"


class FaultPlanError(TxnError):
    """A fault plan file is unreadable or holds an invalid fault; the message says which."""

    default_code: ClassVar[ErrorCode] = TxnCode.CONFIG


class InjectedFault(TxnError):
    """Raised by a fault with action "raise" (testing only)."""


@dataclass(frozen=True, kw_only=True)
class Fault:
    """One entry of a fault plan file."""

    id: str
    step: str
    action: str
    epoch: int | None = None
    partition: int | None = None
    after_rows: int = 0
    times: int = 1
    seconds: float = 0.0  # actions sleep / await only: how long to block at most, in seconds
    waits_for: str | None = None  # action await only: id of the fault to wait for

    @classmethod
    def parse(cls, raw: Any, path: str) -> Fault:
        """Validate one JSON entry of the file at ``path``."""
        if not isinstance(raw, dict):
            msg = f"fault plan {path}: each entry must be an object, got {raw!r}"
            raise FaultPlanError(msg)
        try:
            fault = cls(
                id=str(raw["id"]),
                step=str(raw["step"]),
                action=str(raw["action"]),
                epoch=None if raw.get("epoch") is None else int(raw["epoch"]),
                partition=None if raw.get("partition") is None else int(raw["partition"]),
                after_rows=int(raw.get("after_rows", 0)),
                times=int(raw.get("times", 1)),
                seconds=float(raw.get("seconds", 0.0)),
                waits_for=None if raw.get("waits_for") is None else str(raw["waits_for"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            msg = f"fault plan {path}: bad entry {raw!r} ({exc}); needs id, step, action"
            raise FaultPlanError(msg) from None
        if fault.step not in (*TASK_STEPS, *DRIVER_STEPS):
            msg = f"fault plan {path}: unknown step {fault.step!r}"
            raise FaultPlanError(msg)
        if fault.action not in ACTIONS:
            msg = (
                f"fault plan {path}: unknown action {fault.action!r}; "
                f"use one of {', '.join(sorted(ACTIONS))}"
            )
            raise FaultPlanError(msg)
        _check_action(fault, path)
        return fault

    def matches(self, step: str, epoch: int, partition: int | None) -> bool:
        """Return whether this fault targets ``step`` of ``epoch`` (and ``partition``)."""
        return (
            self.step == step
            and (self.epoch is None or self.epoch == epoch)
            and (self.partition is None or partition is None or self.partition == partition)
        )


def _check_action(fault: Fault, path: str) -> None:
    """Refuse bad ``seconds`` / ``waits_for`` and an unsafe ``kill_app`` (module docstring)."""
    timed = fault.action in TIMED_ACTIONS
    if timed and not 0 < fault.seconds < math.inf:
        msg = f'fault plan {path}: fault {fault.id!r} ({fault.action}) needs finite "seconds" > 0'
        raise FaultPlanError(msg)
    if not timed and fault.seconds != 0:
        msg = f'fault plan {path}: fault {fault.id!r}: "seconds" is for sleep and await only'
        raise FaultPlanError(msg)
    if (fault.action == "await") != (fault.waits_for is not None):
        msg = (
            f'fault plan {path}: fault {fault.id!r}: action await needs "waits_for" (the id '
            "of another fault of the plan), and only await takes it"
        )
        raise FaultPlanError(msg)
    if fault.action == "kill_app" and os.environ.get(KILL_APP_ENV) != "1":
        msg = (
            f"fault plan {path}: fault {fault.id!r} uses kill_app, which SIGKILLs this "
            "process's whole session; it is only for an application started in a session "
            f"of its own (connectors.demo.app.AppProcess). Set {KILL_APP_ENV}=1 in that "
            "application's environment, or use action kill."
        )
        raise FaultPlanError(msg)


@dataclass(frozen=True)
class FaultPlan:
    """A file of faults to inject (TESTING ONLY). Picklable; read lazily in each process."""

    path: str
    KILL_APP_ENV: ClassVar[str] = KILL_APP_ENV

    def faults(self) -> list[Fault]:
        """Parse the plan file; a missing file means no faults."""
        try:
            with open(self.path, encoding="utf-8") as f:
                raw = json.load(f)
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            msg = f"fault plan {self.path} is unreadable: {exc}"
            raise FaultPlanError(msg) from exc
        if not isinstance(raw, list):
            msg = f"fault plan {self.path} must hold a JSON list of faults"
            raise FaultPlanError(msg)
        faults = [Fault.parse(entry, self.path) for entry in raw]
        ids = {f.id for f in faults}
        for fault in faults:
            waits_for = fault.waits_for
            if waits_for is not None and (waits_for not in ids or waits_for == fault.id):
                msg = (
                    f"fault plan {self.path}: fault {fault.id!r} waits for {waits_for!r}, which "
                    "is not another fault of this plan"
                )
                raise FaultPlanError(msg)
        return faults

    def has_fired(self, fault_id: str) -> bool:
        """Return whether the fault ``fault_id`` has fired (claimed) at least once."""
        return os.path.exists(f"{self.path}.{fault_id}.0")

    def claim(self, fault: Fault) -> bool:
        """Claim one firing of ``fault``; False once it has fired ``times`` times."""
        for n in range(fault.times):
            try:
                fd = os.open(f"{self.path}.{fault.id}.{n}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                continue
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            return True
        return False

    def mid_write_threshold(self, epoch: int, partition: int) -> Fault | None:
        """Return the first mid_write fault aimed at this task, if any (without claiming it)."""
        for fault in self.faults():
            if fault.matches(TaskStep.MID_WRITE, epoch, partition):
                return fault
        return None

    def interrupt_write(self, epoch: int, partition: int) -> tuple[int, Callable[[], None]] | None:
        """``StepHooks``: fire this task's mid_write fault after its ``after_rows`` rows."""
        fault = self.mid_write_threshold(epoch, partition)
        if fault is None:
            return None
        return fault.after_rows, lambda: self.fire_fault(fault)

    def fire(self, step: str, epoch: int, partition: int | None = None) -> None:
        """Inject every matching fault of ``step`` that can still be claimed."""
        for fault in self.faults():
            if fault.matches(step, epoch, partition) and self.claim(fault):
                self._act(fault)

    def fire_fault(self, fault: Fault) -> None:
        """Inject ``fault`` if it can still be claimed (used by the mid-write hook)."""
        if self.claim(fault):
            self._act(fault)

    def _act(self, fault: Fault) -> None:
        if fault.action != "await":
            act(fault)
            return
        assert fault.waits_for is not None  # noqa: S101 - checked at parse
        deadline = time.monotonic() + fault.seconds
        while not self.has_fired(fault.waits_for) and time.monotonic() < deadline:
            time.sleep(AWAIT_POLL_S)


@contextlib.contextmanager
def inject_faults(plan: FaultPlan, *, sink_id: str | None = None) -> Iterator[FaultPlan]:
    """Install ``plan`` as this process's fault hooks for the block (module docstring).

    ``sink_id``: only the sink (or composite sink) of that id runs into the plan; None:
    every sink of the process. The hooks installed before for the same scope are back when
    the block ends, however it ends; the write tasks an epoch started inside the block keep
    the plan they were given.
    """
    previous = _hooks.install(plan, sink_id=sink_id)
    try:
        yield plan
    finally:
        _hooks.install(previous, sink_id=sink_id)


def act(fault: Fault) -> None:
    """Carry out ``fault`` (the actions of the module docstring; ``await`` needs its plan)."""
    if fault.action == "sleep":
        time.sleep(fault.seconds)
        return
    if fault.action == "kill_app":
        kill_app()
    if fault.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    msg = f"injected fault {fault.id!r} at step {fault.step}"
    raise InjectedFault(msg)


def kill_app() -> None:
    """SIGKILL the application this process belongs to (``kill_app``; never returns).

    1. the session leader's process group: the app's driver and its JVM (the session and
       that group share the leader's id);
    2. this process's own group: in a Python worker, PySpark's daemon and its workers;
       in the driver, the same group again, so this process dies here at the latest.
    """
    session = os.getsid(0)
    if session <= 1:
        msg = f"kill_app refused: session id {session} is not an application's own session"
        raise InjectedFault(msg)
    own_group = os.getpgid(0)
    if own_group != session:
        os.killpg(session, signal.SIGKILL)
    os.killpg(own_group, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)  # only reached if the signals were not delivered yet
