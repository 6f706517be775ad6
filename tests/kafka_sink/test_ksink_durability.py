"""The durability settings of ``_client._durability``: state topics, rule set, enforcement.

The checks against a cluster: integration_tests/kafka_sink/test_ksink_it_durability.py.
"""

import logging
import pickle

import pytest

from connectors.kafka import KafkaCode, KafkaConnectorError, KafkaSink
from connectors.kafka._client import DurabilityFinding, DurabilityRules, StateTopicDurability
from connectors.kafka._client import _durability as durability
from txn import TxnCode


@pytest.mark.parametrize(
    ("brokers", "settled"),
    [(1, (1, 1)), (2, (2, 2)), (3, (3, 2)), (5, (3, 2))],
)
def test_state_topics_default_to_min_3_replicas_and_min_2_in_sync(brokers, settled):
    assert StateTopicDurability().settle(brokers) == settled


def test_state_topic_overrides_win_and_each_may_come_alone():
    assert StateTopicDurability(2, 1).settle(5) == (2, 1)
    assert StateTopicDurability(replication=1).settle(3) == (1, 1)
    assert StateTopicDurability(min_insync_replicas=3).settle(3) == (3, 3)


def test_a_min_isr_the_cluster_cannot_meet_is_a_preflight_error():
    with pytest.raises(
        KafkaConnectorError,
        match="state_topic_min_insync_replicas=3 exceeds",
        check=lambda e: e.code is KafkaCode.PREFLIGHT,
    ):
        StateTopicDurability(min_insync_replicas=3).settle(2)


@pytest.mark.parametrize(
    "options",
    [
        {"state_topic_replication": 0},
        {"state_topic_replication": "3"},
        {"state_topic_replication": True},
        {"state_topic_min_insync_replicas": -1},
        {"state_topic_replication": 2, "state_topic_min_insync_replicas": 3},
    ],
)
def test_bad_state_topic_options_fail_at_construction(options):
    with pytest.raises(
        KafkaConnectorError, match="state_topic_", check=lambda e: e.code is TxnCode.CONFIG
    ):
        KafkaSink("localhost:1", "out", "sid", **options)


def test_sink_options_reach_its_config_and_survive_pickling():
    sink = KafkaSink(
        "localhost:1",
        "out",
        "sid",
        state_topic_replication=3,
        state_topic_min_insync_replicas=2,
        strict_cluster_checks=True,
    )
    cfg = pickle.loads(pickle.dumps(sink.config))
    assert cfg.state_topics == StateTopicDurability(3, 2)
    assert cfg.strict_cluster_checks is True
    assert KafkaSink("localhost:1", "out", "sid").config.strict_cluster_checks is False
    finding = DurabilityFinding(subject="topic 'out'", setting="s", value="1", fix="f")
    assert pickle.loads(pickle.dumps(finding)) == finding
    assert pickle.loads(pickle.dumps(StateTopicDurability(2))) == StateTopicDurability(2)


@pytest.mark.parametrize(
    ("predicate", "holds", "fails"),
    [
        (durability.replicated_enough, ["3", "5"], ["1", "2"]),
        (durability.enough_insync_replicas, ["2", "3"], ["1"]),
        (durability.unclean_election_off, ["false", "FALSE"], ["true", "True "]),
    ],
)
def test_each_rule_is_a_named_predicate(predicate, holds, fails):
    assert all(predicate(v) for v in holds)
    assert not any(predicate(v) for v in fails)


def test_the_rule_set_covers_the_topic_and_the_transaction_state_log():
    rules = DurabilityRules()
    assert [r.setting for r in rules.topic_rules] == [
        "replication.factor",
        "min.insync.replicas",
        "unclean.leader.election.enable",
    ]
    assert [r.setting for r in rules.broker_rules] == [
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
    ]


FINDINGS = [
    DurabilityFinding(
        subject="topic 'out'", setting="min.insync.replicas", value="1", fix="raise it to 2"
    ),
    DurabilityFinding(
        subject="broker 1",
        setting="transaction.state.log.min.isr",
        value="1",
        fix="set it to 2",
    ),
]


def test_findings_are_warnings_one_line_each(caplog):
    caplog.set_level(logging.WARNING, "connectors.kafka")
    DurabilityRules.enforce(FINDINGS, strict=False, option="strict_cluster_checks")
    assert [r.getMessage() for r in caplog.records] == [
        "topic 'out': min.insync.replicas=1 is weaker than exactly-once needs; raise it to 2",
        "broker 1: transaction.state.log.min.isr=1 is weaker than exactly-once needs; set it to 2",
    ]


def test_strict_findings_raise_one_preflight_error_naming_all(caplog):
    with pytest.raises(
        KafkaConnectorError, check=lambda e: e.code is KafkaCode.PREFLIGHT
    ) as raised:
        DurabilityRules.enforce(FINDINGS, strict=True, option="strict_cluster_checks")
    assert all(f.line() in str(raised.value) for f in FINDINGS)
    assert "strict_cluster_checks=False" in str(raised.value)
    assert caplog.records == []


def test_no_findings_no_warning_even_when_strict(caplog):
    DurabilityRules.enforce([], strict=True, option="strict_cluster_checks")
    assert caplog.records == []
