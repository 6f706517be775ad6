"""The one factory of the kit's Kafka clients: every Producer, Consumer and AdminClient.

Every confluent-kafka client in ``connectors`` is built here (a unit test scans the
package for constructions elsewhere, and for the address setting's name anywhere else),
from a :class:`Cluster`: the bootstrap address plus the settings every client of one
sink, source or command shares (``client_config``: ``security.protocol``, ``sasl.*``,
``ssl.*``, ``client.id``, ...). A sink's, source's or command's clients therefore all
reach a secured cluster, or none does.

What the factory adds to the caller's librdkafka settings (:func:`_settings`):

1. the kind's defaults (:data:`ADMIN_DEFAULTS` for an AdminClient), under the cluster's
   shared settings, under the caller's role settings (a role's own settings, e.g. a
   producer's ``producer_config``, come on top), then the address;
2. ``logger``: librdkafka's own log lines (``%3|...|FAIL|...``) go to the Python logger
   ``connectors.kafka.librdkafka`` instead of stderr; users set its level and handlers
   like any other logger. librdkafka queues its lines and confluent-kafka delivers them
   when the client is polled (``poll``, ``flush``, a consumer's ``poll``);
3. rate limiting on that logger: the same line (digits ignored, so retry counters and
   timings do not make lines distinct) is emitted at most once per
   ``LOG_REPEAT_WINDOW_S``; the next one that passes says how many were suppressed.
   Secret values are scrubbed from those lines (``_secrets``);
4. ``oauth_cb`` given as ``"package.module:function"`` (a string travels to Spark tasks
   and fits a properties file) is imported and passed as the function.

:func:`connect_admin` also waits, bounded, until the cluster answers and turns a wrong
address, a refused connection or a failed authentication into a typed error naming the
address and the option to fix (``connectors.kafka._client._connect``).
"""

from __future__ import annotations

import importlib
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from connectors.kafka._client import _secrets
from connectors.kafka._client._secrets import Settings

# librdkafka's name of the address setting: written here only (the unit test scans for
# it); sinks take it as ``bootstrap_servers``, the source as the ``kafka.``-prefixed name.
BOOTSTRAP = "bootstrap.servers"
# Settings every client takes that are callbacks: given as "package.module:function".
CALLBACK_SETTINGS = frozenset({"oauth_cb"})

# What the factory gives every AdminClient unless the user's settings say otherwise. An
# admin client is short-lived, one per driver-side lookup, and its first request after
# the bootstrap answer needs a broker connection: with librdkafka's sparse connections
# (2.10+ drops the bootstrap connection once it knows the brokers) that connection waits
# out a ~50 ms rate limit (half of reconnect.backoff.ms), on every new admin client.
# Connecting to every broker at once costs one connection per broker, for a few clients.
ADMIN_DEFAULTS: Mapping[str, Any] = {"enable.sparse.connections": False}

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
        text = record.getMessage()
        clean = _secrets.scrub(text)
        if suppressed:
            clean = f"{clean} ({suppressed} similar lines suppressed)"
        if clean != text:
            record.msg, record.args = clean, None
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


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """One Kafka cluster as the kit's clients reach it: the address and the shared settings.

    Frozen and picklable (it travels to Spark tasks inside sink and source configs); its
    repr hides secret values. ``address_option`` and ``config_option`` name where the user
    gave the two (``bootstrap_servers`` / ``client_config`` of a sink; the source's
    ``kafka.*`` options; ``--bootstrap-servers`` / ``--command-config`` of ``eos``), so
    every error names the option to fix.
    """

    bootstrap_servers: str
    config: Settings = Settings()
    address_option: str = field(default="bootstrap_servers", compare=False)
    config_option: str = field(default="client_config", compare=False)

    @property
    def security_protocol(self) -> str:
        """``security.protocol`` of the shared settings, upper case (default PLAINTEXT)."""
        return str(self.config.get("security.protocol") or "PLAINTEXT").upper()

    def spark_options(self, prefix: str = "kafka.") -> dict[str, str]:
        """Return the address and the shared settings as ``prefix``-ed Spark source options."""
        settings = {**self.config.as_dict(), BOOTSTRAP: self.bootstrap_servers}
        return {f"{prefix}{k}": v for k, v in settings.items()}


def load_callback(spec: str) -> Callable[..., Any]:
    """Import the function ``"package.module:function"`` names.

    Raises:
        ValueError: ``spec`` is malformed, or does not name a callable.
        ImportError: the module cannot be imported.

    """
    module, _, name = spec.partition(":")
    if not module or not name:
        msg = f"expected 'package.module:function', got {spec!r}"
        raise ValueError(msg)
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part, None)
    if not callable(obj):
        msg = f"{spec!r} does not name a callable"
        raise ValueError(msg)
    return obj  # type: ignore[no-any-return]


def _settings(
    cluster: Cluster | None, settings: Mapping[str, Any], defaults: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Return the settings a client is built with (steps in the module doc)."""
    conf: dict[str, Any] = dict(defaults or {})
    if cluster is not None:
        conf.update(cluster.config.as_dict())
    conf.update(settings)
    if cluster is not None:
        conf[BOOTSTRAP] = cluster.bootstrap_servers
    for key in CALLBACK_SETTINGS & conf.keys():
        if isinstance(conf[key], str):
            conf[key] = load_callback(conf[key])
    _secrets.remember(conf)
    conf["logger"] = librdkafka_logger()
    return conf


def producer(cluster: Cluster, settings: Mapping[str, Any] | None = None) -> Producer:
    """Return a Producer on ``cluster`` with the role's ``settings`` (librdkafka names)."""
    return Producer(_settings(cluster, settings or {}))


def consumer(cluster: Cluster, settings: Mapping[str, Any]) -> Consumer:
    """Return a Consumer on ``cluster`` with the role's ``settings`` (``group.id`` at least)."""
    return Consumer(_settings(cluster, settings))


def admin(cluster: Cluster, settings: Mapping[str, Any] | None = None) -> AdminClient:
    """Return an AdminClient on ``cluster`` (``settings``: e.g. an ``error_cb``)."""
    return AdminClient(_settings(cluster, settings or {}, ADMIN_DEFAULTS))


def unconnected_producer(settings: Mapping[str, Any]) -> Producer:
    """Return a Producer without an address: librdkafka parses ``settings`` and connects nowhere.

    For validation at construction (no network I/O): librdkafka raises on an unknown
    setting or a bad value.
    """
    return Producer(_settings(None, {"log_level": "3", **settings}))


def unconnected_consumer(settings: Mapping[str, Any]) -> Consumer:
    """Return a Consumer without an address (it connects nowhere), e.g. for group metadata."""
    return Consumer(_settings(None, settings))
