"""The one factory of the kit's Kafka clients: every Producer, Consumer and AdminClient.

Every confluent-kafka client in ``connectors`` is built here (a unit test scans the
package for constructions elsewhere), so a setting that every client needs is added in
one place, :func:`_settings` (the next one: the shared security ``client_config``).

What the factory adds to the caller's librdkafka settings:

1. ``logger``: librdkafka's own log lines (``%3|...|FAIL|...``) go to the Python logger
   ``connectors.kafka.librdkafka`` instead of stderr; users set its level and handlers
   like any other logger. librdkafka queues its lines and confluent-kafka delivers them
   when the client is polled (``poll``, ``flush``, a consumer's ``poll``).
2. rate limiting on that logger: the same line (digits ignored, so retry counters and
   timings do not make lines distinct) is emitted at most once per
   ``LOG_REPEAT_WINDOW_S``; the next one that passes says how many were suppressed.

:func:`connect_admin` also waits, bounded, until the cluster answers and turns a wrong
address, a refused connection or a failed authentication into a typed error naming the
address and the option to fix (``connectors.kafka._connect``).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

LOGGER_NAME = "connectors.kafka.librdkafka"
# Seconds during which one librdkafka line is emitted once: a broker restart makes every
# client log the same connection failure on each reconnect (about 1,000 lines a run).
LOG_REPEAT_WINDOW_S = 60.0
# Distinct lines remembered for rate limiting (bounded memory; the oldest is forgotten).
LOG_REPEAT_KEYS = 1024

_DIGITS = re.compile(r"\d+")


class RepeatFilter(logging.Filter):
    """Let one line through per ``window_s`` per distinct text (digits ignored).

    The first line after a suppressed run carries `` (N similar lines suppressed)``.
    Thread-safe: clients are polled from many threads.
    """

    def __init__(self, window_s: float = LOG_REPEAT_WINDOW_S, max_keys: int = LOG_REPEAT_KEYS):
        super().__init__()
        self._window_s = window_s
        self._max_keys = max_keys
        self._lock = threading.Lock()
        self._seen: OrderedDict[tuple[int, str], tuple[float, int]] = OrderedDict()

    def filter(self, record: logging.LogRecord) -> bool:
        """Return whether ``record`` is emitted; add the suppressed count to it if so."""
        key = (record.levelno, _DIGITS.sub("#", _text_of(record)))
        now = time.monotonic()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last[0] < self._window_s:
                self._seen[key] = (last[0], last[1] + 1)
                return False
            self._seen[key] = (now, 0)
            self._seen.move_to_end(key)
            while len(self._seen) > self._max_keys:
                self._seen.popitem(last=False)
        suppressed = last[1] if last is not None else 0
        if suppressed:
            record.msg = f"{record.getMessage()} ({suppressed} similar lines suppressed)"
            record.args = None
        return True


def _text_of(record: logging.LogRecord) -> str:
    """Return the line without the client's name (``[rdkafka#producer-17]`` differs per client)."""
    args = record.args
    if isinstance(args, tuple) and len(args) == 3:  # confluent-kafka: (facility, name, text)
        return f"{args[0]} {args[2]}"
    return record.getMessage()


def librdkafka_logger() -> logging.Logger:
    """Return the logger librdkafka's lines go to (its rate limit installed once)."""
    logger = logging.getLogger(LOGGER_NAME)
    if not any(isinstance(f, RepeatFilter) for f in logger.filters):
        logger.addFilter(RepeatFilter())
    return logger


def _settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Return the caller's settings plus what every client of the kit gets (module doc)."""
    conf = dict(settings)
    conf["logger"] = librdkafka_logger()
    return conf


def producer(settings: Mapping[str, Any]) -> Producer:
    """Return a Producer with ``settings`` (librdkafka names) and the kit's settings."""
    return Producer(_settings(settings))


def consumer(settings: Mapping[str, Any]) -> Consumer:
    """Return a Consumer with ``settings`` (librdkafka names) and the kit's settings."""
    return Consumer(_settings(settings))


def admin(settings: Mapping[str, Any]) -> AdminClient:
    """Return an AdminClient with ``settings`` (librdkafka names) and the kit's settings."""
    return AdminClient(_settings(settings))
