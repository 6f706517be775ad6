"""Unit tests of integration_tests.support._cluster_status: the master's JSON and executor command lines."""

from __future__ import annotations

import os
import pickle

from integration_tests.support._cluster_status import (
    EXECUTOR_CLASS,
    ExecutorProcess,
    MasterStatus,
    executor_process,
    parent_pid,
    parse_executor_args,
)

# The fields the master's /json/ document carries (trimmed to the ones parsed).
MASTER_DOC = {
    "url": "spark://127.0.0.1:7077",
    "workers": [
        {
            "id": "worker-1",
            "host": "127.0.0.1",
            "port": 40001,
            "state": "ALIVE",
            "cores": 1,
            "coresused": 1,
            "memory": 1024,
        },
        {
            "id": "worker-0",
            "host": "127.0.0.1",
            "port": 40000,
            "state": "DEAD",
            "cores": 1,
            "coresused": 0,
            "memory": 1024,
        },
    ],
    "activeapps": [{"id": "app-1", "name": "eos", "cores": 1, "state": "RUNNING"}],
}


def test_master_status_parse() -> None:
    status = MasterStatus.parse(MASTER_DOC)
    assert status.url == "spark://127.0.0.1:7077"
    assert [w.port for w in status.alive_workers] == [40001]
    assert status.workers[0].cores_used == 1
    assert [(a.id, a.cores) for a in status.apps] == [("app-1", 1)]
    assert MasterStatus.parse({}).workers == ()


def test_executor_command_line() -> None:
    args = [
        "/usr/bin/java",
        "-cp",
        "x",
        EXECUTOR_CLASS,
        "--driver-url",
        "spark://CoarseGrainedScheduler@127.0.0.1:1",
        "--executor-id",
        "3",
        "--hostname",
        "127.0.0.1",
        "--cores",
        "1",
        "--app-id",
        "app-7",
        "--worker-url",
        "spark://Worker@127.0.0.1:40001",
    ]
    assert parse_executor_args(12, args) == ExecutorProcess(12, "app-7", "3", 40001)
    assert parse_executor_args(12, args[:-2]) is None  # no worker URL
    assert parse_executor_args(12, ["/usr/bin/python", "-m", "pyspark.daemon"]) is None


def test_this_process_is_no_executor() -> None:
    assert executor_process(os.getpid()) is None
    assert parent_pid(os.getpid()) == os.getppid()


def test_executor_process_pickle_round_trip() -> None:
    exe = ExecutorProcess(1, "app", "0", 2)
    assert pickle.loads(pickle.dumps(exe)) == exe
