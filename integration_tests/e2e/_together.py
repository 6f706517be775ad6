"""Several independent queries in one Spark application: the cases share its start-up.

An application run pays its JVM, its session, its Python workers and its first shuffle
before the first epoch; cases whose faults stay inside their own query (a Python worker
killed, a task raising, a zombie producer outside the app) can run side by side in one
application, each query with its own input, checkpoint, topic, sink id and fault plan, and
each case checked on its own afterwards. Not for faults that end the application (a
driver-side ``kill``, ``kill_app``, SIGTERM): they would hit every query of it; such a
case's killed run keeps an application of its own, and its restart (no fault) can share.

Contract:

1. ``python -m integration_tests.e2e._together CONFIG_JSON_FILE...`` starts one Spark
   session (the configs' ``master``, which must be the same for all) and runs each
   config's query (``connectors.demo.app.run_query``) in a thread of its own, all at once
   (``--stagger``: each once the one before had its first epoch);
2. it prints ``EPOCH{i} {json}`` after each batch of query ``i`` (the app's epoch line),
   ``DONE{i}`` when query ``i`` wrote its whole input, and exits 0 when every query is
   done, 3 when one failed (its traceback on stderr);
3. :class:`Together` runs it from a test, like ``connectors.demo.app.AppProcess``: the
   epochs of each query, its exit code; :func:`run_cases` runs the queries of several
   :class:`Case` s and then each case's own check.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from connectors.demo.app import EpochLine, PipelineConfig, make_spark, run_query
from connectors.ops._properties import environment_variables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EXIT_QUERY_FAILED = 3
# Seconds to wait for a query's first epoch before starting the next one: started all at
# once, the queries' Python data source processes started together on a loaded machine and
# one did not connect back to the JVM within Spark's fixed 10 s (seen in CI).
STAGGER_WAIT_S = 60.0
STAGGER_FLAG = "--stagger"
# Seconds between checks while waiting for a condition on the queries' epochs.
POLL_INTERVAL_S = 0.2
# The repository root: the subprocess imports this module from there.
ROOT = Path(__file__).resolve().parents[2]


# One line at a time on stdout: print() writes a line and its newline apart, so two
# queries' threads printing at once could run their lines together.
_STDOUT_LOCK = threading.Lock()


def _say(line: str) -> None:
    with _STDOUT_LOCK:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _run_one(
    spark: SparkSession,
    index: int,
    cfg: PipelineConfig,
    failed: list[int],
    going: threading.Event,
) -> None:
    def print_epoch(line: EpochLine) -> None:
        _say(f"EPOCH{index} {line.to_line().removeprefix('EPOCH ')}")
        going.set()

    try:
        run_query(spark, cfg, on_epoch=print_epoch)
    except Exception:  # noqa: BLE001 - reported through the exit code, traceback on stderr
        traceback.print_exc()
        failed.append(index)
        return
    finally:
        going.set()
    _say(f"DONE{index}")


def main(argv: Sequence[str]) -> int:
    """Run the queries of the config files ``argv`` side by side (contract, steps 1-2).

    ``--stagger`` first: start each query once the one before had its first epoch.
    """
    stagger = list(argv[:1]) == [STAGGER_FLAG]
    configs = [PipelineConfig.from_json(Path(a).read_text()) for a in argv[int(stagger) :]]
    masters = {c.master for c in configs}
    if len(masters) != 1:
        print(f"the configs name different masters: {sorted(masters)}", file=sys.stderr)
        return 2
    spark = make_spark(masters.pop(), app_name="eos-together")
    failed: list[int] = []
    going = [threading.Event() for _ in configs]
    threads = [
        threading.Thread(target=_run_one, args=(spark, i, c, failed, going[i]), daemon=True)
        for i, c in enumerate(configs)
    ]
    try:
        for t, started in zip(threads, going, strict=True):
            t.start()
            if stagger:
                started.wait(STAGGER_WAIT_S)  # one query's start-up at a time
        for t in threads:
            t.join()
    finally:
        spark.stop()
    return EXIT_QUERY_FAILED if failed else 0


@dataclass(frozen=True)
class Case:
    """One case of a shared application: its query's config and its check of the outcome.

    ``check(epochs)`` gets the epoch lines of its own query and asserts everything the case
    asserts on its own (its fault fired, the checker's invariants, ...).
    """

    config: PipelineConfig
    check: Callable[[Sequence[EpochLine]], None]


def run_cases(
    cases: Mapping[str, Case], workdir: Path, timeout_s: float, *, stagger: bool = False
) -> None:
    """Run the cases' queries in one application, then every case's check.

    Every check runs even when an earlier one failed; the assertion names each failed case.
    ``stagger``: start the queries one after the other (``main``), for cases whose timing
    does not depend on starting together.
    """
    app = Together([c.config for c in cases.values()], workdir, "together", stagger).start()
    code = app.wait(timeout_s)
    assert code == 0, f"the shared application exited {code}:\n{app.stderr_tail()}"
    assert all(app.done), f"queries not done: {app.done}"
    failed: list[str] = []
    for epochs, (name, case) in zip(app.epochs, cases.items(), strict=True):
        try:
            case.check(epochs)
        except AssertionError as exc:
            failed.append(f"case {name}: {exc}")
    assert not failed, "\n".join(failed)


class Together:
    """One application running the queries of ``configs`` (contract, step 3)."""

    def __init__(
        self, configs: Sequence[PipelineConfig], workdir: Path, name: str, stagger: bool = False
    ) -> None:
        """Describe the run; nothing starts before :meth:`start`."""
        self.configs = list(configs)
        self.stagger = stagger
        self.workdir = workdir
        self.name = name
        self.epochs: list[list[EpochLine]] = [[] for _ in self.configs]
        self.done = [False] * len(self.configs)
        self.stderr_path = workdir / f"{name}.stderr.log"
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> Together:
        self.workdir.mkdir(parents=True, exist_ok=True)
        paths = []
        for i, cfg in enumerate(self.configs):
            path = self.workdir / f"{self.name}-{i}.json"
            path.write_text(cfg.to_json())
            paths.append(str(path))
        env = dict(os.environ)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        # The client settings reach the app in its environment, never in a config file
        # (as AppProcess hands them over): one set for every query of the application.
        shared = {tuple(sorted(c.client_config.items())) for c in self.configs}
        assert len(shared) == 1, "the queries of one application share their client settings"
        env.update(environment_variables(self.configs[0].client_config))
        with self.stderr_path.open("w") as err:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", __name__, *([STAGGER_FLAG] * self.stagger), *paths],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=env,
                cwd=ROOT,
                start_new_session=True,
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for raw in self._proc.stdout:
            head, _, rest = raw.strip().partition(" ")
            if head.startswith("EPOCH") and head[5:].isdigit():
                parsed = EpochLine.parse(f"EPOCH {rest}")
                if parsed is not None:
                    self.epochs[int(head[5:])].append(parsed)
            elif head.startswith("DONE") and head[4:].isdigit():
                self.done[int(head[4:])] = True

    def wait_for(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``condition()`` holds or the application exits; return whether it held."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if condition():
                return True
            if self._proc is not None and self._proc.poll() is not None:
                return condition()
            time.sleep(POLL_INTERVAL_S)
        return False

    def wait(self, timeout_s: float) -> int:
        """Wait for the application's exit; SIGKILL what is left of its process group."""
        assert self._proc is not None
        try:
            code = self._proc.wait(timeout=timeout_s)
        finally:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self._reader is not None:
            self._reader.join(timeout=10)
        return code

    def stderr_tail(self, lines: int = 60) -> str:
        """The last ``lines`` lines of the application's stderr, for failure messages."""
        if not self.stderr_path.exists():
            return ""
        return "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-lines:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
