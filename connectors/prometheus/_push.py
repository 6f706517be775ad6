"""``PushGatewayExporter``: the collector's metrics pushed to a Prometheus push gateway.

For jobs too short to be scraped (a backfill, ``Trigger.AvailableNow``): push after each
epoch (``push_on="epoch"``, from a background thread, so a slow gateway never delays an
epoch) and once more at :meth:`~PushGatewayExporter.stop`, or only at stop
(``push_on="stop"``). Each push replaces the job's group on the gateway (HTTP PUT) with
the collector's whole registry.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.error import HTTPError
from urllib.parse import urlsplit

from prometheus_client import push_to_gateway
from prometheus_client.exposition import default_handler
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from connectors.prometheus._errors import MetricsConfigError, MetricsPushError

if TYPE_CHECKING:
    from connectors.prometheus._collector import PrometheusCollector
    from connectors.stage import EpochMetrics

log = logging.getLogger("connectors.prometheus")

PUSH_ON = ("epoch", "stop")
# Seconds for one push request: a gateway on the job's network answers within a second;
# one that takes longer than this is treated as down for that attempt.
PUSH_TIMEOUT_S = 10.0
# Attempts of one push (connection errors and 5xx / 429 answers are retried; other 4xx
# answers are not: the gateway refused the content or the address is wrong).
PUSH_ATTEMPTS = 3
# Seconds of the first wait between attempts (doubling, at most PUSH_MAX_WAIT_S).
PUSH_FIRST_WAIT_S = 0.5
PUSH_MAX_WAIT_S = 4.0
# Seconds stop() waits for a background push in progress before its own final push.
STOP_TIMEOUT_S = PUSH_ATTEMPTS * (PUSH_TIMEOUT_S + PUSH_MAX_WAIT_S)


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, HTTPError):
        return exc.code >= 500 or exc.code == 429
    return isinstance(exc, OSError)


class PushGatewayExporter:
    """Pushes ``collector``'s registry to ``gateway`` under ``job`` (module docstring).

    ``gateway``: the push gateway's address (``http://host:9091``, ``https://...`` or
    ``host:9091``); never logged, as it may carry credentials. ``grouping_key``: extra
    labels of the group (e.g. ``{"sink_id": ...}``). ``handler``: a ``prometheus_client``
    push handler (``basic_auth_handler`` wrapped for credentials, ...).
    """

    def __init__(
        self,
        collector: PrometheusCollector,
        gateway: str,
        job: str,
        *,
        push_on: str = "epoch",
        grouping_key: Mapping[str, str] | None = None,
        timeout_s: float = PUSH_TIMEOUT_S,
        handler: Callable[..., Any] = default_handler,
    ) -> None:
        _check(gateway, job, push_on, timeout_s)
        self._collector = collector
        self._gateway = gateway
        self._job = job
        self._push_on = push_on
        self._grouping_key = {str(k): str(v) for k, v in (grouping_key or {}).items()}
        self._timeout_s = float(timeout_s)
        self._handler = handler
        self._pending = threading.Event()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._remove: Callable[[], None] | None = None
        self.pushes = 0  # successful pushes so far

    def start(self) -> PushGatewayExporter:
        """Push after each epoch from now on (``push_on="epoch"``); returns ``self``."""
        if self._push_on == "epoch" and self._thread is None:
            self._closing.clear()
            self._thread = threading.Thread(
                target=self._run, name="eos-prometheus-push", daemon=True
            )
            self._thread.start()
            self._remove = self._collector.on_epoch(self._epoch_ended)
        return self

    def push(self) -> None:
        """Push the registry now, with bounded retries.

        Raises:
            MetricsPushError: the gateway did not take it (unreachable, or an error answer).

        """
        try:
            for attempt in Retrying(
                retry=retry_if_exception(_retryable),
                stop=stop_after_attempt(PUSH_ATTEMPTS),
                wait=wait_exponential(multiplier=PUSH_FIRST_WAIT_S, max=PUSH_MAX_WAIT_S),
                reraise=True,
            ):
                with attempt:
                    push_to_gateway(
                        self._gateway,
                        job=self._job,
                        registry=self._collector.registry,
                        grouping_key=self._grouping_key,
                        timeout=self._timeout_s,
                        handler=self._handler,
                    )
        except OSError as exc:
            msg = (
                f"the push gateway at {_where(self._gateway)} did not take the metrics of "
                f"job {self._job!r}: {type(exc).__name__}: {exc}"
            )
            raise MetricsPushError(msg) from exc
        self.pushes += 1

    def stop(self) -> None:
        """Stop pushing after epochs, then push once more (the final state).

        Raises:
            MetricsPushError: the final push failed.

        """
        if self._remove is not None:
            self._remove()
            self._remove = None
        thread, self._thread = self._thread, None
        if thread is not None:
            self._closing.set()
            self._pending.set()
            thread.join(STOP_TIMEOUT_S)
        self.push()

    def _epoch_ended(self, metrics: EpochMetrics) -> None:
        self._pending.set()  # the epoch's thread only flags it: pushing is the worker's

    def _run(self) -> None:
        while True:
            self._pending.wait()
            if self._closing.is_set():
                return
            self._pending.clear()
            try:
                self.push()
            except MetricsPushError as exc:
                log.warning("%s (the next epoch pushes again)", exc)

    def __enter__(self) -> PushGatewayExporter:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.stop()
        except MetricsPushError:
            if exc is None:
                raise
            log.warning("final metrics push failed", exc_info=True)  # keep the block's error


def _check(gateway: str, job: str, push_on: str, timeout_s: float) -> None:
    if not _valid_address(gateway):
        msg = (
            "gateway must be the push gateway's http:// or https:// address or host:port, "
            "e.g. 'http://pushgateway:9091'"
        )
        raise MetricsConfigError(msg)
    if not isinstance(job, str) or not job:
        msg = f"job must be a non-empty name (the gateway's job label), got {job!r}"
        raise MetricsConfigError(msg)
    if push_on not in PUSH_ON:
        msg = f"push_on must be one of {PUSH_ON}, got {push_on!r}"
        raise MetricsConfigError(msg)
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
        msg = f"timeout_s must be a positive number of seconds, got {timeout_s!r}"
        raise MetricsConfigError(msg)


def _valid_address(gateway: object) -> bool:
    if not isinstance(gateway, str):
        return False
    try:
        parts = urlsplit(_with_scheme(gateway))
        _ = parts.port  # ValueError: not a port number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _with_scheme(gateway: str) -> str:
    return gateway if "://" in gateway else f"http://{gateway}"


def _where(gateway: str) -> str:
    """Return the gateway's scheme, host and port: never its user info or path."""
    parts = urlsplit(_with_scheme(gateway))
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}"
