import pickle

import pytest

from connectors.kafka import KafkaCode, KafkaConnectorError, KafkaSink, SinkConfig
from txn import CommitMode, Guarantee, TxnCode, has_code

BASE = {"bootstrap_servers": "127.0.0.1:9", "topic": "out", "sink_id": "s1"}


def make(**over):
    args = {**BASE, **over}
    return KafkaSink(args.pop("bootstrap_servers"), args.pop("topic"), args.pop("sink_id"), **args)


def test_defaults_and_parsing():
    sink = make(guarantee="at-least-once", mode="unaligned")
    cfg = sink.config
    assert cfg.guarantee is Guarantee.AT_LEAST_ONCE
    assert cfg.mode is CommitMode.UNALIGNED
    assert cfg.transactional is False
    assert make().config.transactional is True
    assert make().config.stage_retries == 2
    assert make().config.vote_channel == "driver"
    assert make(stage_retries=0, vote_channel="barrier").config.vote_channel == "barrier"
    assert make().config.producer_strategy.value == "pooled"
    assert make(producer_strategy="reference").config.producer_strategy.value == "reference"


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"bootstrap_servers": ""}, "bootstrap_servers"),
        ({"topic": "bad topic"}, "topic"),
        ({"topic": ""}, "topic"),
        ({"sink_id": "a/b"}, "sink_id"),
        ({"sink_id": "x" * 201}, "sink_id"),
        ({"guarantee": "exactly-twice"}, "guarantee"),
        ({"mode": "sideways"}, "mode"),
        ({"parallelism": 0}, "parallelism"),
        ({"parallelism": True}, "parallelism"),
        ({"parallelism": 1.5}, "parallelism"),
        ({"transaction_timeout_ms": 10}, "transaction_timeout_ms"),
        ({"transaction_timeout_ms": "60000"}, "transaction_timeout_ms"),
        ({"order_by": "offset"}, "order_by"),
        ({"order_by": ["ok", ""]}, "order_by"),
        ({"epoch_log": ""}, "epoch_log"),
        ({"marker_topic": "no spaces"}, "marker_topic"),
        ({"epoch_log_topic": ".."}, "epoch_log_topic"),
        ({"stage_retries": -1}, "stage_retries"),
        ({"stage_retries": None}, "stage_retries"),
        ({"vote_channel": "rpc"}, "vote_channel"),
        ({"vote_channel": None}, "vote_channel"),
        ({"producer_strategy": "fresh"}, "producer_strategy must be one of 'reference', 'pooled'"),
        ({"producer_strategy": None}, "producer_strategy"),
    ],
)
def test_bad_options_raise_typed_error_naming_the_option(over, needle):
    with pytest.raises(
        KafkaConnectorError, match=needle, check=lambda e: e.code is TxnCode.CONFIG
    ) as info:
        make(**over)
    assert has_code(info.value, TxnCode.CONFIG)
    assert has_code(info.value, TxnCode.CONFIG)


@pytest.mark.parametrize(
    "key", ["transactional.id", "bootstrap.servers", "enable.idempotence", "transaction.timeout.ms"]
)
def test_reserved_producer_settings_are_refused_with_a_hint(key):
    with pytest.raises(
        KafkaConnectorError, match="managed by the kit", check=lambda e: e.code is TxnCode.CONFIG
    ):
        make(producer_config={key: "x"})


def test_unknown_librdkafka_setting_is_refused_at_construction():
    with pytest.raises(
        KafkaConnectorError, match="librdkafka", check=lambda e: e.code is TxnCode.CONFIG
    ):
        make(producer_config={"no.such.setting": "1"})
    with pytest.raises(
        KafkaConnectorError, match="librdkafka", check=lambda e: e.code is TxnCode.CONFIG
    ):
        make(producer_config={"linger.ms": "not-a-number"})


def test_producer_settings_pass_through_and_override_defaults():
    cfg = make(
        producer_config={
            "linger.ms": 50,
            "compression.type": "lz4",
            "enable.gapless.guarantee": False,
        }
    ).config
    settings = cfg.producer_settings("s1-3")
    assert settings["linger.ms"] == "50"
    assert settings["compression.type"] == "lz4"
    assert settings["enable.gapless.guarantee"] == "false"
    assert settings["transactional.id"] == "s1-3"
    assert settings["transaction.timeout.ms"] == "60000"
    assert "bootstrap.servers" not in settings  # the client factory adds the cluster's
    assert cfg.cluster.bootstrap_servers == "127.0.0.1:9"
    assert "transactional.id" not in cfg.producer_settings(None)


def test_producer_config_values_must_be_plain():
    with pytest.raises(
        KafkaConnectorError, match="callbacks", check=lambda e: e.code is TxnCode.CONFIG
    ):
        make(producer_config={"linger.ms": object()})


def test_ids_and_groups_follow_the_scheme():
    cfg = make(sink_id="orders").config
    assert cfg.transactional_id(4) == "orders-4"
    assert cfg.marker_group(4) == "orders.marker.4"


def test_fingerprint_is_stable_and_tracks_routing_options():
    a = make().config.fingerprint()
    assert (
        a
        == make(
            parallelism=7, guarantee="exactly-once", transaction_timeout_ms=90000
        ).config.fingerprint()
    )
    assert a != make(topic="other").config.fingerprint()
    assert a != make(order_by=["offset"]).config.fingerprint()
    assert a != make(changelog=True).config.fingerprint()


def test_sink_config_pickle_round_trip():
    cfg = make(order_by=["o"], producer_config={"linger.ms": 5}).config
    again = pickle.loads(pickle.dumps(cfg))
    assert again == cfg
    assert isinstance(again, SinkConfig)


def test_construction_does_no_network_io():
    # Port 9 (discard) on localhost has no broker: construction must still succeed quickly.
    sink = make(bootstrap_servers="127.0.0.1:9")
    assert sink.config.bootstrap_servers == "127.0.0.1:9"


def test_sink_pickles_with_its_config_only():
    sink = make(parallelism=3)
    again = pickle.loads(pickle.dumps(sink))
    assert again.config == sink.config
    assert again._res.log is None and not again._preflight_done
    assert again._res.votes is None


# -- client_config: the settings every Kafka client of the sink shares --------------------
SECURE = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "app",
    "sasl.password": "SENTINEL-c0nfig-secret",
    "client.id": "orders-app",
}


def test_client_config_is_validated_and_kept_with_its_secrets():
    cfg = make(client_config=SECURE).config
    assert cfg.client_config.as_dict() == SECURE
    assert cfg.cluster.config.as_dict() == SECURE
    assert cfg.cluster.bootstrap_servers == "127.0.0.1:9"
    assert cfg.cluster.security_protocol == "SASL_SSL"
    again = pickle.loads(pickle.dumps(cfg))
    assert (
        again == cfg and again.client_config.as_dict()["sasl.password"] == SECURE["sasl.password"]
    )


def test_the_config_repr_hides_secret_values():
    cfg = make(client_config=SECURE, producer_config={"linger.ms": 5}).config
    for text in (repr(cfg), str(cfg), repr(cfg.cluster), str(cfg.client_config)):
        assert "SENTINEL" not in text
        assert "[redacted]" in text and "orders-app" in text


@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("bootstrap.servers", "bootstrap_servers"),
        ("transactional.id", "sink_id"),
        ("isolation.level", "committed"),
        ("enable.idempotence", "every producer"),
        ("group.id", "sink_id"),
        ("linger.ms", "producer_config"),
        ("acks", "producer_config"),
    ],
)
def test_client_config_refuses_what_the_kit_owns_naming_what_to_use(key, hint):
    with pytest.raises(
        KafkaConnectorError,
        match="managed by the kit|a producer setting",
        check=lambda e: e.code is KafkaCode.CLIENT_CONFIG,
    ) as info:
        make(client_config={key: "1"})
    assert hint in str(info.value) and key in str(info.value)
    assert has_code(info.value, KafkaCode.CLIENT_CONFIG)


@pytest.mark.parametrize("key", ["security.protocol", "sasl.password", "ssl.ca.location"])
def test_security_settings_in_producer_config_are_refused_towards_client_config(key):
    with pytest.raises(
        KafkaConnectorError,
        match="put it in client_config",
        check=lambda e: e.code is TxnCode.CONFIG,
    ):
        make(producer_config={key: "x"})


def test_client_config_errors_never_quote_a_secret():
    with pytest.raises(
        KafkaConnectorError, match="librdkafka", check=lambda e: e.code is KafkaCode.CLIENT_CONFIG
    ) as info:
        make(client_config={"sasl.password": "SENTINEL-bad", "no.such.setting": "1"})
    assert "SENTINEL" not in str(info.value)
    with pytest.raises(
        KafkaConnectorError,
        match="string, number or bool",
        check=lambda e: e.code is KafkaCode.CLIENT_CONFIG,
    ):
        make(client_config={"sasl.password": object()})
    with pytest.raises(
        KafkaConnectorError, match="librdkafka", check=lambda e: e.code is KafkaCode.CLIENT_CONFIG
    ):
        make(client_config={"security.protocol": "SASL_SOMETHING"})


def test_oauth_cb_travels_by_name():
    cfg = make(client_config={"oauth_cb": "json:dumps"}).config
    assert cfg.client_config.as_dict()["oauth_cb"] == "json:dumps"
    with pytest.raises(
        KafkaConnectorError, match="oauth_cb", check=lambda e: e.code is KafkaCode.CLIENT_CONFIG
    ):
        make(client_config={"oauth_cb": "no_such_module_x:token"})
    with pytest.raises(
        KafkaConnectorError, match="module-level", check=lambda e: e.code is KafkaCode.CLIENT_CONFIG
    ):
        make(client_config={"oauth_cb": lambda _cfg: ("t", 0.0)})
