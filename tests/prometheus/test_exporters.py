"""The HTTP endpoint and the push-gateway exporter over real sockets: a real HTTP GET of
the endpoint, and pushes to a small real HTTP server that records them (no push gateway
binary here; prometheus_client's push speaks plain HTTP PUT to it:
integration_tests/support/pushgateway.py)."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client.exposition import default_handler
from prometheus_client.parser import text_string_to_metric_families

from connectors.prometheus import (
    MetricsConfigError,
    MetricsPushError,
    MetricsServer,
    PrometheusCollector,
    PushGatewayExporter,
)
from connectors.prometheus._push import PUSH_ATTEMPTS
from connectors.stage import EpochMetrics
from integration_tests.support.pushgateway import (
    ARRIVAL_TIMEOUT_S,
    RecordingGateway,
    recording_gateway,
)


def epoch(batch_id: int) -> EpochMetrics:
    return EpochMetrics(
        sink_id="orders",
        batch_id=batch_id,
        epoch=batch_id,
        query_id="q1",
        guarantee="exactly_once",
        mode="aligned",
        skipped=False,
        committed=True,
    )


def committed(text: str) -> float:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "eos_sink_epochs_total" and s.labels["outcome"] == "committed":
                return s.value
    raise AssertionError("no eos_sink_epochs_total in the text")


# -- the HTTP endpoint ------------------------------------------------------------------
def get(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain")
        return str(answer.read().decode())


def test_the_endpoint_serves_the_collector_on_an_ephemeral_port_and_closes() -> None:
    collector = PrometheusCollector()
    server = MetricsServer(collector, port=0, host="127.0.0.1")
    assert server.port == 0 and not server.running
    with server:
        port = server.port
        assert port > 0 and server.running
        collector.record(epoch(0))
        assert committed(get(port)) == 1
        collector.record(epoch(1))
        assert committed(get(port)) == 2
    assert not server.running
    with pytest.raises(OSError):  # the socket is closed: nothing listens there any more
        get(port)
    server.start()  # a stopped server starts again
    try:
        assert committed(get(server.port)) == 2
    finally:
        server.stop()
    server.stop()  # a second stop is a no-op


def test_a_taken_port_is_an_os_error_and_two_servers_serve_their_own_collector() -> None:
    first, second = PrometheusCollector(), PrometheusCollector()
    first.record(epoch(0))
    with MetricsServer(first, host="127.0.0.1") as a, MetricsServer(second, host="127.0.0.1") as b:
        assert committed(get(a.port)) == 1
        assert "eos_sink_epochs_total" not in get(b.port)
        with pytest.raises(OSError):
            MetricsServer(second, port=a.port, host="127.0.0.1").start()


@pytest.mark.parametrize("port", [-1, 65536, "9108", True, 1.5])
def test_a_bad_port_is_refused_at_construction(port: object) -> None:
    with pytest.raises(MetricsConfigError, match="port must be an integer"):
        MetricsServer(PrometheusCollector(), port=port)  # type: ignore[arg-type]


# -- the push gateway -------------------------------------------------------------------
@pytest.fixture
def gateway() -> Iterator[RecordingGateway]:
    with recording_gateway() as record:
        yield record


def test_push_after_each_epoch_and_once_more_at_stop(gateway: RecordingGateway) -> None:
    collector = PrometheusCollector()
    before_start = set(threading.enumerate())
    pusher = PushGatewayExporter(
        collector, gateway.url, job="backfill", grouping_key={"sink_id": "orders"}
    ).start()
    [push_thread] = set(threading.enumerate()) - before_start  # the exporter's background push
    collector.record(epoch(0))
    pushes = gateway.wait_for(1)
    assert (pushes[0].method, pushes[0].path) == ("PUT", "/metrics/job/backfill/sink_id/orders")
    assert committed(pushes[0].body) == 1
    collector.record(epoch(1))
    deadline = time.monotonic() + ARRIVAL_TIMEOUT_S
    while committed(gateway.pushes[-1].body) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)  # epochs coalesce: the latest push carries the latest count
    assert committed(gateway.pushes[-1].body) == 2
    before = len(gateway.pushes)
    pusher.stop()
    assert len(gateway.pushes) == before + 1  # the final push, synchronous
    assert committed(gateway.pushes[-1].body) == 2
    # Stopped: the background thread has ended and record() itself never pushes, so an
    # epoch recorded now can reach the gateway by no path.
    assert not push_thread.is_alive()
    collector.record(epoch(2))
    assert len(gateway.pushes) == before + 1


def test_push_on_stop_pushes_only_at_stop(gateway: RecordingGateway) -> None:
    collector = PrometheusCollector()
    before_start = set(threading.enumerate())
    with PushGatewayExporter(collector, gateway.url, job="short", push_on="stop"):
        # No background thread was started (the only pusher besides stop()), and record()
        # never pushes, so nothing can reach the gateway before the block ends.
        assert set(threading.enumerate()) <= before_start
        for b in range(3):
            collector.record(epoch(b))
        assert gateway.pushes == []
    assert len(gateway.pushes) == 1
    assert gateway.pushes[0].path == "/metrics/job/short"
    assert committed(gateway.pushes[0].body) == 3


def test_a_5xx_answer_is_retried_and_a_4xx_answer_is_not(gateway: RecordingGateway) -> None:
    collector = PrometheusCollector()
    collector.record(epoch(0))
    pusher = PushGatewayExporter(collector, gateway.url, job="j", push_on="stop")
    gateway.answers = [503]
    pusher.push()
    assert len(gateway.pushes) == 2 and pusher.pushes == 1
    gateway.answers = [400]
    with pytest.raises(MetricsPushError, match="HTTP Error 400") as info:
        pusher.push()
    assert len(gateway.pushes) == 3  # refused content is not sent again
    assert "127.0.0.1" in str(info.value)


def test_an_unreachable_gateway_fails_after_the_retries_without_its_credentials() -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    collector = PrometheusCollector()
    secret = f"http://etl:hunter2@127.0.0.1:{port}/prefix"
    attempts: list[str] = []

    def counting_handler(url: str, *args: Any, **kwargs: Any) -> Callable[[], None]:
        attempts.append(url)  # one call per attempt, before it connects
        return default_handler(url, *args, **kwargs)

    pusher = PushGatewayExporter(
        collector, secret, job="j", push_on="stop", timeout_s=2, handler=counting_handler
    )
    with pytest.raises(MetricsPushError) as info:
        pusher.stop()
    assert len(attempts) == PUSH_ATTEMPTS  # a refused connection is retried, boundedly
    assert "hunter2" not in str(info.value) and "etl" not in str(info.value)
    assert f"http://127.0.0.1:{port}" in str(info.value)


def test_a_failed_final_push_does_not_hide_the_error_of_the_with_block() -> None:
    collector = PrometheusCollector()
    pusher = PushGatewayExporter(collector, "127.0.0.1:1", job="j", push_on="stop", timeout_s=1)
    with pytest.raises(KeyError), pusher:
        raise KeyError("the job's own error")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"gateway": "ftp://gw:9091"}, "gateway must be"),
        ({"gateway": "http://"}, "gateway must be"),
        ({"gateway": "http://gw:port"}, "gateway must be"),
        ({"job": ""}, "job must be"),
        ({"push_on": "batch"}, "push_on must be one of"),
        ({"timeout_s": 0}, "timeout_s must be"),
    ],
)
def test_bad_push_options_are_refused_at_construction(
    kwargs: dict[str, object], match: str
) -> None:
    options: dict[str, object] = {"gateway": "gw:9091", "job": "j", **kwargs}
    with pytest.raises(MetricsConfigError, match=match):
        PushGatewayExporter(PrometheusCollector(), **options)  # type: ignore[arg-type]
