"""Fault injection for tests (TESTING ONLY; never set a FaultPlan in production).

A :class:`FaultPlan` names a JSON file holding a list of faults::

    [{"id": "k1", "step": "mid_write", "epoch": 3, "partition": 0,
      "action": "kill", "after_rows": 100, "times": 1}]

Steps on the task side: ``after_open``, ``mid_write``, ``after_pre_commit``,
``before_commit``, ``after_commit``; on the driver: ``driver_after_plan``,
``driver_after_stage``, ``driver_before_complete``. ``epoch``/``partition`` null (or
absent) match any. A fault fires at most ``times`` times in total, across processes:
each firing first claims ``{path}.{id}.{n}`` with ``O_CREAT | O_EXCL``, so a retried
task does not die forever. Action ``kill`` sends SIGKILL to the current process (the
Python worker, or the driver for driver steps); ``raise`` raises ``InjectedFault``.
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass
from typing import Any

from connectors.kafka._errors import InjectedFault, SinkConfigError

TASK_STEPS = frozenset(
    {"after_open", "mid_write", "after_pre_commit", "before_commit", "after_commit"}
)
DRIVER_STEPS = frozenset({"driver_after_plan", "driver_after_stage", "driver_before_complete"})
ACTIONS = frozenset({"kill", "raise"})


@dataclass(frozen=True)
class Fault:
    """One entry of a fault plan file."""

    id: str
    step: str
    action: str
    epoch: int | None = None
    partition: int | None = None
    after_rows: int = 0
    times: int = 1

    @classmethod
    def parse(cls, raw: Any, path: str) -> Fault:
        """Validate one JSON entry of the file at ``path``."""
        if not isinstance(raw, dict):
            msg = f"fault plan {path}: each entry must be an object, got {raw!r}"
            raise SinkConfigError(msg)
        try:
            fault = cls(
                id=str(raw["id"]),
                step=str(raw["step"]),
                action=str(raw["action"]),
                epoch=None if raw.get("epoch") is None else int(raw["epoch"]),
                partition=None if raw.get("partition") is None else int(raw["partition"]),
                after_rows=int(raw.get("after_rows", 0)),
                times=int(raw.get("times", 1)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            msg = f"fault plan {path}: bad entry {raw!r} ({exc}); needs id, step, action"
            raise SinkConfigError(msg) from None
        if fault.step not in TASK_STEPS | DRIVER_STEPS:
            msg = f"fault plan {path}: unknown step {fault.step!r}"
            raise SinkConfigError(msg)
        if fault.action not in ACTIONS:
            msg = f"fault plan {path}: unknown action {fault.action!r}; use kill or raise"
            raise SinkConfigError(msg)
        return fault

    def matches(self, step: str, epoch: int, partition: int | None) -> bool:
        """Return whether this fault targets ``step`` of ``epoch`` (and ``partition``)."""
        return (
            self.step == step
            and (self.epoch is None or self.epoch == epoch)
            and (self.partition is None or partition is None or self.partition == partition)
        )


@dataclass(frozen=True)
class FaultPlan:
    """A file of faults to inject (TESTING ONLY). Picklable; read lazily in each process."""

    path: str

    def faults(self) -> list[Fault]:
        """Parse the plan file; a missing file means no faults."""
        try:
            with open(self.path, encoding="utf-8") as f:
                raw = json.load(f)
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            msg = f"fault plan {self.path} is unreadable: {exc}"
            raise SinkConfigError(msg) from exc
        if not isinstance(raw, list):
            msg = f"fault plan {self.path} must hold a JSON list of faults"
            raise SinkConfigError(msg)
        return [Fault.parse(entry, self.path) for entry in raw]

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
            if fault.matches("mid_write", epoch, partition):
                return fault
        return None

    def fire(self, step: str, epoch: int, partition: int | None = None) -> None:
        """Inject every matching fault of ``step`` that can still be claimed."""
        for fault in self.faults():
            if fault.matches(step, epoch, partition) and self.claim(fault):
                act(fault)

    def fire_fault(self, fault: Fault) -> None:
        """Inject ``fault`` if it can still be claimed (used by the mid-write hook)."""
        if self.claim(fault):
            act(fault)


def act(fault: Fault) -> None:
    """Carry out ``fault``: SIGKILL this process or raise ``InjectedFault``."""
    if fault.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    msg = f"injected fault {fault.id!r} at step {fault.step}"
    raise InjectedFault(msg)
