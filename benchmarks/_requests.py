"""Count Kafka broker requests by API, per client role, from librdkafka's own protocol log.

Works against any broker (minikafka or real Kafka) and changes no sink code:

1. :func:`install` replaces ``confluent_kafka.Producer`` and ``Consumer`` (and the names
   that already-imported ``connectors.*`` modules bound to them) with subclasses that
   add ``debug=protocol`` and a ``client.id`` naming the client's role, its id and the
   process (``task-producer.bench-x-sink-0.4242``). librdkafka then prints one line per
   request sent (``Sent XRequest``) and per response (``Received XResponse ... rtt``)
   to the process's stderr, synchronously from its own threads (no ``poll`` needed);
2. Spark's Python workers run :func:`install` at start-up through
   ``benchmarks/_worker_site/sitecustomize.py`` when :func:`worker_env` is in their
   environment; their stderr reaches the JVM's stderr, which is the driver's stderr;
3. :func:`capture_stderr` points the driver process's stderr file descriptor (inherited
   by the JVM, hence by the workers) at a log file, keeping Python's ``sys.stderr`` on the
   terminal; :func:`parse_log` reads the requests back with their wall-clock timestamps;
4. :func:`split_by_window` attributes each request to the time window (one variant's
   epoch) its ``Sent`` line falls in. Variants run one after another, so a window holds
   only that variant's requests (plus rare background metadata refreshes of idle
   clients of other variants, which are counted too and stay visible as noise).

Roles: ``log-producer`` (the driver's epoch-log appends), ``log-reader`` (epoch-log
loads), ``task-producer`` (a write task's transactional producer), ``marker-consumer``
(a write task's marker reads), ``producer`` (a non-transactional producer: the sink's
at-least-once tasks), ``baseline`` (the hand-written sink) and ``consumer`` (others).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka

ENV_FLAG = "EOS_BENCH_RDKAFKA_PROTOCOL_LOG"
DEBUG_ENV = "EOS_BENCH_RDKAFKA_DEBUG"  # e.g. "eos,broker": extra debug contexts, same log
SITE_DIR = Path(__file__).resolve().parent / "_worker_site"
REPO_ROOT = Path(__file__).resolve().parent.parent
DRIVER_ROLES = ("log-producer", "log-reader")
_ORIGINAL = {"Producer": confluent_kafka.Producer, "Consumer": confluent_kafka.Consumer}
_LINE = re.compile(
    r"^%7\|(?P<ts>\d+\.\d+)\|(?:SEND|RECV)\|(?P<client>[^#|]+#(?:producer|consumer)-\d+)\|"
    r" \[thrd:[^\]]*\]: (?P<broker>\S+): (?P<dir>Sent|Received) (?P<api>\w+?)(?:Request|Response)"
    r" \(v\d+, \d+ bytes"
    r"(?: @ \d+)?, CorrId (?P<corr>\d+)(?:, rtt (?P<rtt>[\d.]+)ms)?"
)
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class Request:
    """One request a client sent: when, by which client (role), which API, its RTT."""

    ts: float
    client: str
    role: str
    api: str
    rtt_ms: float | None = None


def client_role(conf: Mapping[str, Any], kind: str) -> tuple[str, str]:
    """Return ``(role, ident)`` of a client from its configuration (see module doc)."""
    if "client.id" in conf:
        return _SAFE.sub("_", str(conf["client.id"])), ""
    if kind == "producer":
        txn = conf.get("transactional.id")
        if txn is None:
            return "producer", ""
        role = "log-producer" if str(txn).endswith(".coordinator") else "task-producer"
        return role, str(txn)
    group = str(conf.get("group.id", ""))
    if ".epoch-log-reader." in group:
        return "log-reader", group.rsplit(".", 1)[0]
    if ".marker." in group:
        return "marker-consumer", group
    return "consumer", group


def with_protocol_log(conf: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """Return ``conf`` plus ``debug=protocol`` and a role-naming ``client.id``.

    A ``logger`` is removed: the kit's clients route librdkafka's lines to a Python logger
    (``connectors.kafka._client._clients``), which sees them only when the client is polled and
    rate-limits repeated lines; the count needs every line on stderr, synchronously.
    """
    out = dict(conf)
    out.pop("logger", None)
    role, ident = client_role(conf, kind)
    out["client.id"] = _SAFE.sub("_", ".".join(p for p in (role, ident, str(os.getpid())) if p))
    debug = str(out.get("debug", ""))
    extra = os.environ.get(DEBUG_ENV, "")  # more librdkafka debug contexts (diagnostics)
    out["debug"] = ",".join(d for d in (debug, "protocol", extra) if d)
    if int(out.get("log_level", 7)) < 7:
        out["log_level"] = 7
    return out


def _merged(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    conf: dict[str, Any] = dict(args[0]) if args else {}
    conf.update(kwargs)
    return conf


class LoggingProducer(_ORIGINAL["Producer"]):  # type: ignore[misc, valid-type]
    """``confluent_kafka.Producer`` that logs every request (see module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(with_protocol_log(_merged(args, kwargs), "producer"))


class LoggingConsumer(_ORIGINAL["Consumer"]):  # type: ignore[misc, valid-type]
    """``confluent_kafka.Consumer`` that logs every request (see module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(with_protocol_log(_merged(args, kwargs), "consumer"))


def install() -> None:
    """Make every Kafka client created from now on in this process log its requests."""
    replacement = {"Producer": LoggingProducer, "Consumer": LoggingConsumer}
    for name, cls in replacement.items():
        setattr(confluent_kafka, name, cls)
    for mod_name, module in list(sys.modules.items()):
        if not mod_name.startswith(("connectors.", "benchmarks.")) or module is None:
            continue
        for name, cls in replacement.items():
            if getattr(module, name, None) is _ORIGINAL[name]:
                setattr(module, name, cls)


def worker_env(*, protocol_log: bool = True) -> dict[str, str]:
    """Environment that runs ``benchmarks/_worker_site`` in Spark's Python workers.

    With ``protocol_log`` the workers run :func:`install` at start-up.
    """
    path = [str(SITE_DIR), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]
    env = {"PYTHONPATH": os.pathsep.join(p for p in path if p)}
    if protocol_log:
        env[ENV_FLAG] = "1"
    return env


@contextlib.contextmanager
def capture_stderr(path: Path) -> Iterator[Path]:
    """Send this process's (and its children's) stderr fd to ``path``; keep ``sys.stderr``.

    Start Spark inside the block: the JVM inherits the descriptor, and the Python
    workers' stderr goes through the JVM's.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
    old_stderr = sys.stderr
    os.dup2(log_fd, 2)
    os.close(log_fd)
    sys.stderr = os.fdopen(os.dup(saved), "w", buffering=1)
    try:
        yield path
    finally:
        sys.stderr.flush()
        sys.stderr.close()
        sys.stderr = old_stderr
        os.dup2(saved, 2)
        os.close(saved)


def parse_log(lines: Iterable[str]) -> list[Request]:
    """Return the requests of a protocol log (``Sent`` lines, with the RTT of the answer)."""
    sent: dict[tuple[str, str], Request] = {}
    rtts: dict[tuple[str, str], float] = {}
    for line in lines:
        m = _LINE.match(line)
        if m is None:
            continue
        key = (m["client"], f"{m['broker']}/{m['api']}/{m['corr']}")
        if m["dir"] == "Sent":
            role = m["client"].split(".", 1)[0]
            sent[key] = Request(float(m["ts"]), m["client"], role, m["api"])
        elif m["rtt"] is not None:
            rtts[key] = float(m["rtt"])
    return sorted(
        (Request(r.ts, r.client, r.role, r.api, rtts.get(k)) for k, r in sent.items()),
        key=lambda r: r.ts,
    )


def read_log(path: Path) -> list[Request]:
    """:func:`parse_log` of a file (undecodable bytes from other writers are replaced)."""
    with path.open(encoding="utf-8", errors="replace") as f:
        return parse_log(f)


def split_by_window(
    requests: Sequence[Request], windows: Mapping[Any, tuple[float, float]]
) -> dict[Any, list[Request]]:
    """Return the requests sent inside each ``(start, end)`` window (wall-clock seconds)."""
    out: dict[Any, list[Request]] = {key: [] for key in windows}
    ordered = sorted(windows.items(), key=lambda kv: kv[1][0])
    for r in requests:
        for key, (start, end) in ordered:
            if start <= r.ts <= end:
                out[key].append(r)
                break
            if r.ts < start:
                break
    return out


def by_api(requests: Iterable[Request], roles: Sequence[str] | None = None) -> Counter[str]:
    """Count requests by API (only those of ``roles`` when given)."""
    return Counter(r.api for r in requests if roles is None or r.role in roles)
