"""Every Kafka client the kit builds gets the shared settings: sink, log, markers, source, checker.

Unit test of the wiring past the first contact (integration_tests/kafka_sink/
test_ksink_it_client_config.py proves the first contacts on a real broker): the client
classes of ``connectors.kafka._client._clients`` are replaced by a recorder that raises
:class:`Built` with the settings a client would have been built with (a client without an
address, validation's parser, is built for real), and each internal construction path of
the kit is run until it builds one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from connectors.kafka import KafkaEpochLog, KafkaSink
from connectors.kafka._client import _clients
from connectors.kafka._sink import _producers
from connectors.kafka._sink._markers import marker_consumer
from connectors.kafka._sink._writer import DeliveryErrors
from connectors.kafka._source._cluster import ClusterView
from connectors.kafka._source._fetch import _new_consumer
from connectors.kafka._source._options import SourceOptions
from connectors.verify import produce_input, read_topic

SHARED = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-256",
    "sasl.username": "app",
    "sasl.password": "SENTINEL-reach",
    "client.id": "reach-test",
}


class Built(Exception):
    """What a client would have been built with (raised instead of building it)."""

    def __init__(self, kind: str, conf: dict[str, Any]) -> None:
        super().__init__(kind)
        self.kind, self.conf = kind, conf


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[], Any]], Built]:
    for kind in ("Producer", "Consumer", "AdminClient"):
        real = getattr(_clients, kind)

        def record(conf: dict[str, Any], kind: str = kind, real: Any = real) -> Any:
            if _clients.BOOTSTRAP not in conf:  # validation parses settings, connects nowhere
                return real(conf)
            raise Built(kind, conf)

        monkeypatch.setattr(_clients, kind, record)

    def run(call: Callable[[], Any]) -> Built:
        """Run ``call`` to the first client it builds (its Built, even when wrapped)."""
        with pytest.raises(Exception) as info:
            call()
        error: BaseException | None = info.value
        while error is not None and not isinstance(error, Built):
            error = error.__cause__
        assert isinstance(error, Built), info.value
        return error

    return run


def assert_shared(result: Built, kind: str) -> None:
    assert result.kind == kind
    for key, value in SHARED.items():
        assert result.conf[key] == value, (kind, key)
    assert result.conf["bootstrap.servers"] == "h:9093"


def test_the_sinks_clients(built: Callable[[Callable[[], Any]], Built]) -> None:
    cfg = KafkaSink("h:9093", "out", "s1", client_config=SHARED).config
    producer = built(lambda: _producers.new_producer(cfg, "s1-0", DeliveryErrors()))
    assert_shared(producer, "Producer")
    assert producer.conf["transactional.id"] == "s1-0"
    assert_shared(built(lambda: marker_consumer(cfg.cluster, cfg.marker_group(0))), "Consumer")
    assert_shared(built(lambda: _producers.spare_factory(cfg, 1, 1)(True)), "Producer")
    assert_shared(
        built(KafkaSink("h:9093", "o", "s1", client_config=SHARED).preflight), "AdminClient"
    )


def test_the_epoch_logs_clients(built: Callable[[Callable[[], Any]], Built]) -> None:
    log = KafkaEpochLog("h:9093", "s1", create_topic=False, client_config=SHARED)
    assert_shared(built(log.load), "AdminClient")  # the first contact
    reader = built(log._read_messages)
    assert_shared(reader, "Consumer")
    assert reader.conf["isolation.level"] == "read_committed"
    log._contacted = True
    writer = built(lambda: log.append(_plan()))
    assert_shared(writer, "Producer")
    assert writer.conf["transactional.id"] == "s1.coordinator"


def _plan() -> Any:
    from txn import EpochPlan

    return EpochPlan(sink_id="s1", epoch=0, parallelism=1, fingerprint="fp")


def test_the_sources_clients(built: Callable[[Callable[[], Any]], Built]) -> None:
    options = SourceOptions.from_options(
        {"kafka.bootstrap.servers": "h:9093", "subscribe": "t"}
        | {f"kafka.{k}": v for k, v in SHARED.items()}
    )
    assert_shared(built(lambda: _new_consumer(options)), "Consumer")
    assert_shared(built(ClusterView(options).discover), "AdminClient")


def test_the_checkers_clients(built: Callable[[Callable[[], Any]], Built]) -> None:
    reader = built(lambda: read_topic("h:9093", "t", ends={0: 1}, client_config=SHARED))
    assert_shared(reader, "Consumer")
    assert_shared(
        built(lambda: produce_input("h:9093", "t", 1, client_config=SHARED)), "AdminClient"
    )
