import pickle

import pytest
from confluent_kafka import KafkaError

from minikafka import BrokerConfig, BrokerConfigError
from minikafka._faults import ApiKey, Faults, resolve_api
from minikafka._journal import Journal


def test_config_defaults_and_pickle_roundtrip():
    cfg = BrokerConfig(num_partitions=3)
    assert cfg.transaction_max_timeout_ms == 900_000
    assert pickle.loads(pickle.dumps(cfg)) == cfg


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_partitions": 0},
        {"transaction_max_timeout_ms": -1},
        {"fsync_policy": "sometimes"},
        {"group_initial_rebalance_delay_ms": -5},
        {"num_partitions": "2"},
        {"group_min_session_timeout_ms": 10, "group_max_session_timeout_ms": 5},
        {"topic_load_mode": "sometimes"},
        {"topic_load_delay_ms": -1},
    ],
)
def test_config_rejects_bad_values(kwargs):
    with pytest.raises(BrokerConfigError):
        BrokerConfig(**kwargs)


def test_resolve_api_names():
    assert resolve_api("EndTxn") is ApiKey.END_TXN
    assert resolve_api("end_txn") is ApiKey.END_TXN
    assert resolve_api(0) is ApiKey.PRODUCE
    with pytest.raises(ValueError, match="unknown API"):
        resolve_api("Frobnicate")


def test_faults_queue_and_clear():
    f = Faults()
    f.fail_next(ApiKey.END_TXN, 2, KafkaError.NOT_COORDINATOR)
    f.delay_next("Produce", 1, 0.5)
    assert f.take(ApiKey.END_TXN) == (KafkaError.NOT_COORDINATOR, 0.0)
    assert f.take(ApiKey.PRODUCE) == (None, 0.5)
    assert f.take(ApiKey.PRODUCE) == (None, 0.0)
    f.pause()
    assert f.paused
    f.clear()
    assert not f.paused
    assert f.take(ApiKey.END_TXN) == (None, 0.0)
    with pytest.raises(ValueError):
        f.fail_next("Produce", 1, 123456)


def test_journal_replay_and_torn_tail(tmp_path):
    path = tmp_path / "j.bin"
    j = Journal(path, fsync=True)
    j.rewrite([{"t": "a", "n": 1}])
    j.append({"t": "b", "n": 2})
    j.close()
    with open(path, "ab") as fh:
        fh.write(b"\x00\x00\x00\x10garbage")
    assert list(Journal(path, fsync=False).replay()) == [{"t": "a", "n": 1}, {"t": "b", "n": 2}]
    assert list(Journal(path, fsync=False).replay()) == [{"t": "a", "n": 1}, {"t": "b", "n": 2}]
