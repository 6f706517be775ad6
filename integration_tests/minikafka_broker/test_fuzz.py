"""Fuzzing minikafka's request decoding: random, truncated and mis-sized frames, unknown API keys
and versions, from several connections at once, while a well-behaved client keeps working.

The broker may answer a frame (then with a well-formed response of that API and version, in
order) or close that connection; it must never log an internal error, never stop serving, and
the well-behaved client must never notice. ``test_fuzz_bounded`` runs in the default suite for
a few seconds; ``test_fuzz_long`` runs for ``MINIKAFKA_FUZZ_SECONDS`` (default 120) when
selected with ``--fuzz``. A failure message names the seed that reproduces it.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.response_header.v0 import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1 import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader

from minikafka import BrokerConfig, EmbeddedKafka
from minikafka._handlers import API_TABLE
from minikafka._protocol import response_class
from tests.minikafka.fuzzing import Drawer, Frame, draw_frame

from .conftest import CLIENT_TIMEOUT_S
from .helpers import read_all

# Seconds of fuzzing inside the default suite.
BOUNDED_SECONDS = 6.0
# Seconds of the long run (behind the ``fuzz`` marker) unless MINIKAFKA_FUZZ_SECONDS says else.
LONG_SECONDS = 120.0
# Fuzzing connections running at once.
CONNECTIONS = 4
# Seconds a fuzz connection waits for an answer; a request that legitimately waits longer (a
# long poll, a rebalance) is abandoned by closing the connection.
ANSWER_WAIT_S = 2.0
# Seconds between two messages of the well-behaved client.
CITIZEN_PERIOD_S = 0.3
# Largest answer the fuzzer accepts (bytes): far above anything these small requests cause.
MAX_ANSWER_BYTES = 16 * 1024 * 1024
API_VERSIONS = 18


@dataclass
class Tally:
    """What one fuzz run saw."""

    frames: int = 0
    answers: int = 0
    closes: int = 0
    abandoned: int = 0
    failures: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, outcome: str, failure: str | None = None) -> None:
        with self.lock:
            self.frames += 1
            setattr(self, outcome, getattr(self, outcome) + 1)
            if failure is not None and len(self.failures) < 20:
                self.failures.append(failure)


def _recv_exact(sock: socket.socket, size: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < size:
        chunk = sock.recv(size - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _check_answer(frame: Frame, body: bytes) -> str | None:
    """Why an answer is not a well-formed response to ``frame`` (None when it is)."""
    spec = API_TABLE.get(frame.api_key)
    if spec is None:
        return f"answered unknown API key {frame.api_key}"
    version = frame.version
    if not spec.min_version <= version <= spec.max_version:
        if frame.api_key != API_VERSIONS:
            return f"answered unsupported version {version} of {spec.name}"
        version = 0
    cls = response_class(frame.api_key, version)
    flexible = cls.__flexible__ and frame.api_key != API_VERSIONS
    header_cls = ResponseHeaderV1 if flexible else ResponseHeaderV0
    try:
        header, used = entity_reader(header_cls)(body, 0)
        entity_reader(cls)(body, used)
    except Exception as exc:  # noqa: BLE001 - any decode failure is the finding
        return f"undecodable {cls.__name__}: {exc!r}"
    if header.correlation_id != frame.correlation_id:
        return f"correlation id {header.correlation_id}, expected {frame.correlation_id}"
    return None


def _exchange(sock: socket.socket, frame: Frame) -> tuple[str, str | None, bool]:
    """Send one frame; return (outcome, failure or None, whether the connection is still usable)."""
    try:
        sock.sendall(frame.data)
        if frame.close_after_send:
            sock.shutdown(socket.SHUT_WR)
        head = _recv_exact(sock, 4)
        if head is None:
            bad = frame.expect == "answer"
            return (
                "closes",
                f"{frame.kind} {frame.api_key}v{frame.version}: closed" if bad else None,
                False,
            )
        (size,) = struct.unpack(">i", head)
        if not 4 <= size <= MAX_ANSWER_BYTES:
            return (
                "answers",
                f"{frame.kind} {frame.api_key}v{frame.version}: answer size {size}",
                False,
            )
        body = _recv_exact(sock, size)
    except TimeoutError:
        return "abandoned", None, False
    except (ConnectionResetError, BrokenPipeError):
        bad = frame.expect == "answer"
        return (
            "closes",
            f"{frame.kind} {frame.api_key}v{frame.version}: reset" if bad else None,
            False,
        )
    if body is None:
        return "closes", f"{frame.kind} {frame.api_key}v{frame.version}: torn answer", False
    if frame.expect == "close":
        return (
            "answers",
            f"{frame.kind} {frame.api_key}v{frame.version}: answered, not closed",
            False,
        )
    problem = _check_answer(frame, body)
    failure = f"{frame.kind} {frame.api_key}v{frame.version}: {problem}" if problem else None
    return "answers", failure, frame.kind == "typed"


def _fuzz_connection(
    address: tuple[str, int], seed: int, names: list[str], deadline: float, tally: Tally
) -> None:
    drawer = Drawer(random.Random(seed), names)
    sock: socket.socket | None = None
    correlation_id = 0
    try:
        while time.monotonic() < deadline:
            if sock is None:
                sock = socket.create_connection(address, CLIENT_TIMEOUT_S)
                sock.settimeout(ANSWER_WAIT_S)
            correlation_id += 1
            frame = draw_frame(drawer, correlation_id)
            outcome, failure, usable = _exchange(sock, frame)
            tally.add(outcome, f"seed {seed}: {failure}" if failure else None)
            if not usable:
                sock.close()
                sock = None
    except Exception as exc:  # noqa: BLE001 - reported as a failure of the run
        tally.add("closes", f"seed {seed}: fuzz connection crashed: {exc!r}")
    finally:
        if sock is not None:
            sock.close()


def _citizen(
    bootstrap: str, topic: str, stop: threading.Event, sent: list[bytes], errors: list[str]
) -> None:
    """A well-behaved idempotent producer, one message at a time (its topic is not fuzzed)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0}
    )

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(f"delivery failed: {err}")

    while not stop.is_set() and not errors:
        value = b"citizen-%d" % len(sent)
        producer.produce(topic, value, partition=0, on_delivery=on_delivery)
        if producer.flush(CLIENT_TIMEOUT_S) != 0:
            errors.append(f"message {value!r} not delivered within {CLIENT_TIMEOUT_S}s")
        elif not errors:
            sent.append(value)
        stop.wait(CITIZEN_PERIOD_S)


def _run(
    kafka: EmbeddedKafka, seconds: float, seed: int, caplog: pytest.LogCaptureFixture
) -> Tally:
    bootstrap = kafka.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [f"fuzz-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    citizen_topic = f"citizen-{uuid.uuid4().hex[:6]}"
    for fut in admin.create_topics([NewTopic(t, 2, 1) for t in [*topics, citizen_topic]]).values():
        fut.result(CLIENT_TIMEOUT_S)
    names = [*topics, "fuzz-group", "fuzz-txn", "0"]
    host, port = bootstrap.rsplit(":", 1)
    tally = Tally()
    stop = threading.Event()
    sent: list[bytes] = []
    citizen_errors: list[str] = []
    citizen = threading.Thread(
        target=_citizen, args=(bootstrap, citizen_topic, stop, sent, citizen_errors)
    )
    deadline = time.monotonic() + seconds
    fuzzers = [
        threading.Thread(
            target=_fuzz_connection, args=((host, int(port)), seed + i, names, deadline, tally)
        )
        for i in range(CONNECTIONS)
    ]
    with caplog.at_level(logging.ERROR, logger="minikafka"):
        citizen.start()
        for t in fuzzers:
            t.start()
        for t in fuzzers:
            t.join(seconds + 60)
        stop.set()
        citizen.join(CLIENT_TIMEOUT_S + 10)
    internal = [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("minikafka") and r.levelno >= logging.ERROR
    ]
    assert not tally.failures, f"seed {seed}: {tally.failures}"
    assert not internal, f"seed {seed}: the broker logged internal errors: {internal[:5]}"
    assert not citizen_errors, f"seed {seed}: {citizen_errors}"
    assert len(sent) >= 2, f"seed {seed}: the well-behaved client sent only {len(sent)} messages"
    # Still serving: everything the well-behaved client sent is there, in order.
    assert read_all(bootstrap, citizen_topic, committed=False) == sent
    assert tally.answers > 0 and tally.closes > 0, tally
    return tally


@pytest.fixture
def fuzz_broker():
    cfg = BrokerConfig(group_initial_rebalance_delay_ms=0, transaction_abort_check_interval_ms=100)
    with EmbeddedKafka(config=cfg) as kafka:
        yield kafka


def test_fuzz_bounded(fuzz_broker: EmbeddedKafka, caplog: pytest.LogCaptureFixture) -> None:
    seed = int(os.environ.get("MINIKAFKA_FUZZ_SEED", random.randrange(1_000_000)))
    tally = _run(fuzz_broker, BOUNDED_SECONDS, seed, caplog)
    print(
        f"fuzz seed {seed}: {tally.frames} frames, {tally.answers} answered, {tally.closes} closed"
    )


@pytest.mark.fuzz
def test_fuzz_long(fuzz_broker: EmbeddedKafka, caplog: pytest.LogCaptureFixture) -> None:
    # Runs only with --fuzz (the root conftest skips it otherwise).
    seconds = float(os.environ.get("MINIKAFKA_FUZZ_SECONDS", LONG_SECONDS))
    seed = int(os.environ.get("MINIKAFKA_FUZZ_SEED", random.randrange(1_000_000)))
    tally = _run(fuzz_broker, seconds, seed, caplog)
    print(
        f"fuzz seed {seed}: {tally.frames} frames, {tally.answers} answered, {tally.closes} closed"
    )
