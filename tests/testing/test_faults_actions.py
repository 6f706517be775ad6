"""Unit tests of the FaultPlan actions ``sleep``, ``await`` and ``kill_app`` (no Kafka, no Spark).

``kill_app`` is exercised on a real process tree shaped like a Spark application started by
``AppProcess``: a session leader (the driver), a process in the leader's group (the JVM)
and a process in a group of its own (PySpark's worker daemon and its workers), from which
the fault fires.
"""

import json
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from connectors.testing import Fault, FaultPlan, FaultPlanError
from connectors.testing.faults import KILL_APP_ENV

# Seconds to wait for the fake application to start and to die (busy machine).
PROCESS_TIMEOUT_S = 120.0

# The fake application: a session leader that starts a "JVM" in its own group and a
# "worker" in a new group, publishes their pids, then waits to be killed.
LEADER = r"""
import os, subprocess, sys, time
plan, pids = sys.argv[1], sys.argv[2]
jvm = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
worker = subprocess.Popen([sys.executable, "-c", sys.argv[3], plan, pids], process_group=0)
with open(pids + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {jvm.pid} {worker.pid}")
os.replace(pids + ".tmp", pids)
time.sleep(600)
"""
# The worker: waits until the pids are published, then fires the plan's after_commit fault.
WORKER = r"""
import os, sys, time
from connectors.testing import FaultPlan
plan, pids = sys.argv[1], sys.argv[2]
while not os.path.exists(pids):
    time.sleep(0.05)
assert os.getpgid(0) != os.getsid(0), "the worker must run in a group of its own"
FaultPlan(plan).fire("after_commit", 1, 0)
time.sleep(600)
"""


def write_plan(tmp_path: Path, faults: list[dict[str, object]]) -> FaultPlan:
    path = tmp_path / "faults.json"
    path.write_text(json.dumps(faults))
    return FaultPlan(str(path))


def gone(pid: int) -> bool:
    """Whether ``pid`` is dead (no such process, or a zombie awaiting its parent)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def wait_gone(pid: int) -> bool:
    deadline = time.monotonic() + PROCESS_TIMEOUT_S
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.05)
    return False


def _kill_leftovers(leader: subprocess.Popen[bytes], pids_file: Path) -> None:
    """Clean up after a failed run: SIGKILL whatever of the fake application is alive."""
    pids = [int(p) for p in pids_file.read_text().split()] if pids_file.exists() else []
    for pid in [leader.pid, *pids]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    leader.wait(PROCESS_TIMEOUT_S)


def test_sleep_blocks_for_its_seconds_then_carries_on(tmp_path):
    plan = write_plan(
        tmp_path,
        [{"id": "s", "step": "before_commit", "partition": 1, "action": "sleep", "seconds": 0.3}],
    )
    plan.fire("before_commit", 1, 0)  # other partition: no sleep, no claim
    assert not (tmp_path / "faults.json.s.0").exists()
    started = time.monotonic()
    plan.fire("before_commit", 1, 1)  # returns: the task carries on after the sleep
    assert time.monotonic() - started >= 0.3
    assert (tmp_path / "faults.json.s.0").exists()
    plan.fire("before_commit", 1, 1)  # fired its one time already: no sleep
    assert not (tmp_path / "faults.json.s.1").exists()


def test_sleep_works_as_a_mid_write_fault(tmp_path):
    plan = write_plan(
        tmp_path,
        [{"id": "m", "step": "mid_write", "action": "sleep", "seconds": 0.05, "after_rows": 3}],
    )
    fault = plan.mid_write_threshold(0, 0)
    assert fault is not None and fault.action == "sleep" and fault.seconds == 0.05
    plan.fire_fault(fault)
    assert (tmp_path / "faults.json.m.0").exists()


def _hold_then_sleep(path: str) -> None:
    FaultPlan(path).fire("mid_write", 1, 1)


def test_await_returns_once_the_awaited_fault_fired(tmp_path):
    plan = write_plan(
        tmp_path,
        [
            {"id": "hold", "step": "mid_write", "partition": 1, "action": "sleep", "seconds": 600},
            {
                "id": "wait",
                "step": "before_commit",
                "partition": 0,
                "action": "await",
                "waits_for": "hold",
                "seconds": PROCESS_TIMEOUT_S,
            },
        ],
    )
    assert not plan.has_fired("hold")
    other = multiprocessing.get_context("spawn").Process(target=_hold_then_sleep, args=(plan.path,))
    other.start()
    try:
        plan.fire("before_commit", 1, 0)  # blocks until the other process is held
        assert plan.has_fired("hold"), "await returned before the awaited fault fired"
        assert other.is_alive()  # still sleeping in its hold
    finally:
        other.kill()
        other.join(PROCESS_TIMEOUT_S)
    assert plan.has_fired("wait")


def test_await_gives_up_after_its_seconds(tmp_path):
    plan = write_plan(
        tmp_path,
        [
            {"id": "never", "step": "after_open", "epoch": 99, "action": "raise"},
            {
                "id": "wait",
                "step": "after_open",
                "epoch": 1,
                "action": "await",
                "waits_for": "never",
                "seconds": 0.2,
            },
        ],
    )
    started = time.monotonic()
    plan.fire("after_open", 1, 0)  # carries on after 0.2 s although "never" never fired
    assert time.monotonic() - started >= 0.2
    assert not plan.has_fired("never")


@pytest.mark.parametrize(
    "faults",
    [
        [{"id": "w", "step": "after_open", "action": "await", "seconds": 1}],
        [{"id": "w", "step": "after_open", "action": "await", "waits_for": "x", "seconds": 1}],
        [{"id": "w", "step": "after_open", "action": "await", "waits_for": "w", "seconds": 1}],
        [
            {"id": "h", "step": "after_open", "action": "raise"},
            {"id": "w", "step": "after_open", "action": "await", "waits_for": "h"},
        ],
        [
            {"id": "h", "step": "after_open", "action": "raise", "waits_for": "w"},
            {"id": "w", "step": "after_open", "action": "raise"},
        ],
    ],
)
def test_bad_await_entries_raise_typed_errors(tmp_path, faults):
    with pytest.raises(FaultPlanError, match="waits|seconds"):
        write_plan(tmp_path, faults).faults()


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ({"action": "sleep"}, "seconds"),
        ({"action": "sleep", "seconds": 0}, "seconds"),
        ({"action": "sleep", "seconds": -1}, "seconds"),
        ({"action": "sleep", "seconds": "inf"}, "seconds"),
        ({"action": "sleep", "seconds": "nan"}, "seconds"),
        ({"action": "sleep", "seconds": "soon"}, "bad entry"),
        ({"action": "raise", "seconds": 2}, "sleep and await only"),
        ({"action": "nap"}, "kill_app"),  # the error lists the valid actions
    ],
)
def test_bad_sleep_entries_raise_typed_errors(tmp_path, entry, needle):
    plan = write_plan(tmp_path, [{"id": "x", "step": "after_open", **entry}])
    with pytest.raises(FaultPlanError, match=needle):
        plan.faults()


@pytest.mark.parametrize("value", [None, "", "0", "yes"])
def test_kill_app_is_refused_outside_an_app_of_its_own(tmp_path, monkeypatch, value):
    if value is None:
        monkeypatch.delenv(KILL_APP_ENV, raising=False)
    else:
        monkeypatch.setenv(KILL_APP_ENV, value)
    plan = write_plan(tmp_path, [{"id": "k", "step": "after_commit", "action": "kill_app"}])
    with pytest.raises(FaultPlanError, match=KILL_APP_ENV):
        plan.faults()
    with pytest.raises(FaultPlanError):  # firing parses the plan too: refused, not skipped
        plan.fire("after_commit", 1, 0)
    assert not (tmp_path / "faults.json.k.0").exists()


def test_kill_app_is_accepted_with_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv(FaultPlan.KILL_APP_ENV, "1")
    plan = write_plan(tmp_path, [{"id": "k", "step": "after_commit", "action": "kill_app"}])
    assert [f.action for f in plan.faults()] == ["kill_app"]


def test_kill_app_from_a_worker_group_kills_the_whole_session(tmp_path):
    plan = write_plan(
        tmp_path,
        [{"id": "k", "step": "after_commit", "epoch": 1, "partition": 0, "action": "kill_app"}],
    )
    pids_file = tmp_path / "pids"
    env = {
        **os.environ,
        KILL_APP_ENV: "1",
        "PYTHONPATH": os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")]),
    }
    leader = subprocess.Popen(
        [sys.executable, "-c", LEADER, plan.path, str(pids_file), WORKER],
        env=env,
        start_new_session=True,
    )
    try:
        code = leader.wait(PROCESS_TIMEOUT_S)
    finally:
        _kill_leftovers(leader, pids_file)
    assert code == -signal.SIGKILL, "the session leader (the driver) was not SIGKILLed"
    _, jvm, worker = (int(p) for p in pids_file.read_text().split())
    assert wait_gone(jvm), "the process in the leader's group (the JVM) survived"
    assert wait_gone(worker), "the worker that fired kill_app survived"
    assert (tmp_path / "faults.json.k.0").read_text() == str(worker)


def test_fault_with_seconds_pickle_round_trips():
    fault = Fault(
        id="s",
        step="before_commit",
        action="sleep",
        epoch=1,
        partition=1,
        after_rows=0,
        times=1,
        seconds=2.5,
    )
    assert pickle.loads(pickle.dumps(fault)) == fault
    waiter = Fault(
        id="w",
        step="before_commit",
        action="await",
        epoch=1,
        partition=0,
        after_rows=0,
        times=1,
        seconds=60.0,
        waits_for="s",
    )
    assert pickle.loads(pickle.dumps(waiter)) == waiter
