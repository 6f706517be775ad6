"""An interactive Spark driver in a subprocess, for tests that look at a live application.

``python -m integration_tests.cluster._driver CONF_JSON`` creates a SparkSession with the
settings in CONF_JSON (``spark.master`` among them), prints ``READY {json}`` and then
answers one JSON line per command line read from stdin:

* ``slots``: ``connectors.stage._slots.task_slots`` plus ``defaultParallelism``;
* ``wait N``: ``wait_for_task_slots(spark, N)``, same answer;
* ``sink {json}``: read ``input_topic`` (read_committed) into a DataFrame and write it as
  epoch ``epoch`` with ``KafkaSink(**sink_args)``; answer ``{"ok": true, "committed": ...}``
  or ``{"ok": false, "error_type": ..., "error": ...}`` (the sink is closed either way);
* ``quit`` (or end of input): stop the session and exit.

The pytest process cannot host a driver on the cluster itself: the session-wide local
``spark`` fixture may already own its SparkContext.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any
from unittest import mock

# Seconds for the driver to start (JVM, application registered) on a busy machine.
START_TIMEOUT_S = 240.0
# Seconds for one command's answer (``wait`` polls up to the slots module's timeout).
ANSWER_TIMEOUT_S = 120.0


def _write(spark: Any, job: dict[str, Any]) -> dict[str, Any]:
    from connectors.demo.app._chunks import SPARK_SCHEMA_DDL
    from connectors.demo.app._config import ORDER_COLUMNS
    from connectors.kafka import KafkaSink
    from connectors.verify import read_committed_topic

    rows = [
        (r.key.decode() if r.key is not None else None, r.value, r.partition, r.offset)
        for r in read_committed_topic(job["bootstrap"], job["input_topic"])
    ]
    df = spark.createDataFrame(rows, SPARK_SCHEMA_DDL)
    sink = KafkaSink(
        job["bootstrap"],
        job["output_topic"],
        job["sink_id"],
        order_by=ORDER_COLUMNS,
        **job["sink_args"],
    )
    try:
        result = sink(df, job["epoch"])
    except Exception as exc:  # noqa: BLE001 - the answer reports any failure
        return {"ok": False, "error_type": type(exc).__name__, "error": str(exc)}
    finally:
        sink.close()
    return {"ok": True, "committed": result.committed, "skipped": result.skipped}


def _answer(spark: Any, command: str) -> dict[str, Any]:
    from connectors.stage._slots import task_slots, wait_for_task_slots

    if command.startswith("sink "):
        return _write(spark, json.loads(command[len("sink ") :]))
    words = command.split()
    slots = wait_for_task_slots(spark, int(words[1])) if words[0] == "wait" else task_slots(spark)
    sc = spark.sparkContext
    return {
        **asdict(slots),
        "free": slots.free,
        "default_parallelism": sc.defaultParallelism,
        "app_id": sc.applicationId,
    }


def main() -> int:
    from pyspark.sql import SparkSession

    conf: dict[str, str] = json.loads(sys.argv[1])
    builder = SparkSession.builder.appName("eos-cluster-probe")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    print("READY " + json.dumps({"app_id": spark.sparkContext.applicationId}), flush=True)
    for line in sys.stdin:
        if line.strip() in ("", "quit"):
            break
        print(json.dumps(_answer(spark, line.strip())), flush=True)
    spark.stop()
    return 0


class DriverProcess:
    """The driver above, started with ``env`` added to this process's environment."""

    def __init__(self, conf: dict[str, str], env: dict[str, str], log: Path) -> None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with mock.patch.dict(os.environ, env), log.open("w") as err:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "integration_tests.cluster._driver", json.dumps(conf)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=dict(os.environ),
                start_new_session=True,
            )
        self.log = log
        ready = self._line()
        assert ready.startswith("READY "), f"driver did not start: {ready!r}; see {log}"
        self.app_id: str = json.loads(ready[len("READY ") :])["app_id"]

    def _line(self) -> str:
        assert self._proc.stdout is not None
        return self._proc.stdout.readline().strip()

    def ask(self, command: str) -> dict[str, Any]:
        assert self._proc.stdin is not None
        self._proc.stdin.write(command + "\n")
        self._proc.stdin.flush()
        line = self._line()
        assert line, f"driver exited; see {self.log}"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=ANSWER_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def __enter__(self) -> DriverProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    sys.exit(main())
