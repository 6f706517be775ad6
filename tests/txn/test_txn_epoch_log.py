"""FileEpochLog: durability, corruption detection, locking, compaction, kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from txn import EpochCompletion, EpochPlan, EpochState, FileEpochLog, TxnCode, TxnError
from txn._model import EpochDecision

SINK = "sink-log"
# How long the writer subprocess may take to start and append its first records; generous
# because the CI machine is shared and busy.
WRITER_START_TIMEOUT_S = 120.0


def _commit_epoch(log: FileEpochLog, epoch: int, parallelism: int = 2) -> None:
    log.append(EpochPlan(sink_id=SINK, epoch=epoch, parallelism=parallelism, fingerprint="fp"))
    log.append(EpochDecision(sink_id=SINK, epoch=epoch, commit=True))
    log.append(EpochCompletion(SINK, epoch, committed=True))


def test_records_survive_reopen_and_generation_increases(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with FileEpochLog(path, sink_id=SINK) as log:
        assert log.generation == 1
        _commit_epoch(log, 0)
        log.append(EpochPlan(sink_id=SINK, epoch=1, parallelism=3, fingerprint="fp"))
    with FileEpochLog(path, sink_id=SINK) as log:
        assert log.generation == 2
        history = log.load()
        assert history.state(0) is EpochState.COMMITTED
        assert history.state(1) is EpochState.PLANNED
        assert [p.epoch for p in history.in_doubt()] == [1]
        assert history.max_parallelism() == 3 and history.last_committed_epoch() == 0
        decision = history.decision(0)
        assert decision is not None and decision.commit


def test_illegal_record_is_refused_and_not_written(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with FileEpochLog(path, sink_id=SINK) as log:
        log.append(EpochPlan(sink_id=SINK, epoch=0, parallelism=2, fingerprint="fp"))
        log.append(EpochDecision(sink_id=SINK, epoch=0, commit=True))
        before = path.read_bytes()
        with pytest.raises(
            TxnError,
            match="commit-decided -> aborted",
            check=lambda e: e.code is TxnCode.ILLEGAL_TRANSITION,
        ):
            log.append(EpochCompletion(SINK, 0, committed=False))
        with pytest.raises(
            TxnError, match="belongs to sink", check=lambda e: e.code is TxnCode.ILLEGAL_TRANSITION
        ):
            log.append(EpochCompletion("other", 0, committed=True))
        assert path.read_bytes() == before


def test_second_coordinator_is_locked_out(tmp_path: Path) -> None:
    path = tmp_path / "log"
    first = FileEpochLog(path, sink_id=SINK)
    with pytest.raises(
        TxnError, match=f"pid {os.getpid()}", check=lambda e: e.code is TxnCode.EPOCH_LOG_LOCKED
    ):
        FileEpochLog(path, sink_id=SINK)
    first.close()
    with FileEpochLog(path, sink_id=SINK) as second:
        assert second.generation == 2


def test_coordinator_whose_lock_was_broken_is_fenced(tmp_path: Path) -> None:
    path = tmp_path / "log"
    first = FileEpochLog(path, sink_id=SINK)
    first.append(EpochPlan(sink_id=SINK, epoch=0, parallelism=1, fingerprint="fp"))
    (tmp_path / "log.lock").unlink()  # someone removed the lock file
    with FileEpochLog(path, sink_id=SINK) as second:
        with pytest.raises(
            TxnError, match="fenced", check=lambda e: e.code is TxnCode.EPOCH_LOG_LOCKED
        ):
            first.append(EpochCompletion(SINK, 0, committed=True))
        second.append(EpochCompletion(SINK, 0, committed=True))
    first.close()


def test_closed_log_refuses_use(tmp_path: Path) -> None:
    log = FileEpochLog(tmp_path / "log", sink_id=SINK)
    log.close()
    log.close()
    with pytest.raises(TxnError, match="closed", check=lambda e: e.code is TxnCode.EPOCH_LOG):
        log.load()


def test_log_of_another_sink_is_refused(tmp_path: Path) -> None:
    FileEpochLog(tmp_path / "log", sink_id=SINK).close()
    with pytest.raises(
        TxnError, match="belongs to sink 'sink-log'", check=lambda e: e.code is TxnCode.CONFIG
    ):
        FileEpochLog(tmp_path / "log", sink_id="other")


def _written_log(tmp_path: Path) -> Path:
    path = tmp_path / "log"
    with FileEpochLog(path, sink_id=SINK) as log:
        _commit_epoch(log, 0)
        log.append(EpochPlan(sink_id=SINK, epoch=1, parallelism=2, fingerprint="fp"))
    return path


@pytest.mark.parametrize("keep", [0, 1, 10, 57, -40, -1])
def test_truncated_file_is_reported_with_its_name(tmp_path: Path, keep: int) -> None:
    path = _written_log(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:keep] if keep >= 0 else data[: len(data) + keep])
    with pytest.raises(
        TxnError, match=str(path), check=lambda e: e.code is TxnCode.EPOCH_LOG_CORRUPT
    ):
        FileEpochLog(path, sink_id=SINK)


def test_every_flipped_byte_is_detected(tmp_path: Path) -> None:
    path = _written_log(tmp_path)
    data = path.read_bytes()
    for i in range(len(data)):
        damaged = bytearray(data)
        damaged[i] ^= 0x01
        path.write_bytes(bytes(damaged))
        with pytest.raises(
            TxnError, match=str(path), check=lambda e: e.code is TxnCode.EPOCH_LOG_CORRUPT
        ):
            FileEpochLog(path, sink_id=SINK).close()
    path.write_bytes(data)
    with FileEpochLog(path, sink_id=SINK) as log:
        assert log.load().state(1) is EpochState.PLANNED


def test_removed_record_is_detected(tmp_path: Path) -> None:
    path = _written_log(tmp_path)
    lines = path.read_bytes().split(b"\n")
    del lines[2]  # the decision of epoch 0
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(
        TxnError, match="trailer", check=lambda e: e.code is TxnCode.EPOCH_LOG_CORRUPT
    ):
        FileEpochLog(path, sink_id=SINK)


def test_compaction_keeps_recent_history_and_facts(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with FileEpochLog(path, sink_id=SINK, retain_epochs=3) as log:
        _commit_epoch(log, 0, parallelism=7)
        for epoch in range(1, 20):
            _commit_epoch(log, epoch)
        log.append(EpochPlan(sink_id=SINK, epoch=20, parallelism=2, fingerprint="fp"))
    with FileEpochLog(path, sink_id=SINK, retain_epochs=3) as log:
        history = log.load()
        assert history.epochs() == [16, 17, 18, 19, 20]
        assert history.committed_through == 15
        assert history.is_committed(0) and history.is_committed(15)
        assert history.max_parallelism() == 7  # remembered for abort_lingering
        assert [p.epoch for p in history.in_doubt()] == [20]
        with pytest.raises(
            TxnError,
            match="already committed",
            check=lambda e: e.code is TxnCode.ILLEGAL_TRANSITION,
        ):
            log.append(EpochPlan(sink_id=SINK, epoch=3, parallelism=2, fingerprint="fp"))
    assert path.read_bytes().count(b"\n") == 2 + 13  # header, trailer, records of 16..20


WRITER = textwrap.dedent(
    """
    import sys
    from txn import EpochCompletion, EpochPlan, FileEpochLog
    log = FileEpochLog(sys.argv[1], sink_id="sink-log", retain_epochs=1000)
    history = log.load()
    epoch = (history.max_epoch() if history.max_epoch() is not None else -1) + 1
    while True:
        log.append(EpochPlan(sink_id="sink-log", epoch=epoch, parallelism=2, fingerprint="fp"))
        print(f"plan {epoch}", flush=True)
        log.append(EpochCompletion("sink-log", epoch, committed=True))
        print(f"done {epoch}", flush=True)
        epoch += 1
    """
)


def test_sigkill_while_appending_never_corrupts_the_log(tmp_path: Path) -> None:
    path = tmp_path / "log"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    durable = -1
    for round_no in range(5):
        proc = subprocess.Popen(
            [sys.executable, str(script), str(path)], stdout=subprocess.PIPE, env=env, text=True
        )
        assert proc.stdout is not None
        deadline = time.monotonic() + WRITER_START_TIMEOUT_S
        last = ""
        for _ in range(7 + 3 * round_no):  # stop at a varying protocol point each round
            last = proc.stdout.readline().strip()
            assert last, "writer died"
            assert time.monotonic() < deadline
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        reported = int(last.split()[1])
        with FileEpochLog(path, sink_id=SINK, retain_epochs=1000) as log:
            history = log.load()  # never corrupt
            top = history.max_epoch()
            assert top is not None and top >= reported  # everything acknowledged is durable
            for epoch in range(top):  # a strict prefix of plan/completion pairs
                assert history.is_committed(epoch)
            assert history.state(top) in (EpochState.PLANNED, EpochState.COMMITTED)
            assert top > durable
            durable = top
            # usable: finish the possibly in-doubt epoch and go on
            if history.state(top) is EpochState.PLANNED:
                log.append(EpochCompletion(SINK, top, committed=True))
