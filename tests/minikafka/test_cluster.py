"""Placement, leadership and coordinator routing of a minikafka cluster, on a hand-driven clock."""

import pickle
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from minikafka import BrokerConfig, BrokerConfigError, NodeOp
from minikafka._broker import Broker
from minikafka._cluster import (
    GROUP_COORDINATOR,
    NO_LEADER,
    TXN_COORDINATOR,
    assign_replicas,
    java_string_hash,
    kafka_abs,
    partition_for,
)
from minikafka._control import NodeOpError
from minikafka._handlers._base import COORDINATED, Connection, RequestContext, coordinator_answer
from tests.minikafka.clock import ManualClock


def test_java_string_hash_matches_java():
    # Values of String.hashCode() as Java computes them (UTF-16 code units, int32 overflow).
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_string_hash("\U0001f600") == 31 * 0xD83D + 0xDE00  # a surrogate pair


def test_kafka_abs_and_partition_for_follow_kafka():
    assert kafka_abs(-(2**31)) == 0  # Utils.abs, unlike Math.abs, never stays negative
    assert kafka_abs(-7) == 7
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("Aa", 50) == partition_for("BB", 50)


def test_replica_assignment_is_kafkas_rack_unaware_one():
    # Kafka's AdminUtils scaladoc example: 10 partitions, 5 brokers, replication 3, start 0.
    ids = (0, 1, 2, 3, 4)
    assignment = [assign_replicas(i, 3, ids, 0) for i in range(10)]
    assert assignment[0] == (0, 1, 2)
    assert assignment[4] == (4, 0, 1)
    assert assignment[5] == (0, 2, 3)  # the shift grew after one round of the brokers
    assert assignment[9] == (4, 1, 2)
    for replicas in assignment:
        assert len(set(replicas)) == 3
    leaders = [replicas[0] for replicas in assignment]
    assert sorted(leaders) == sorted(ids * 2)  # every broker leads two partitions


def test_single_node_places_everything_on_it():
    assert assign_replicas(7, 1, (5,), 0) == (5,)


def _broker(**config: object) -> tuple[Broker, ManualClock]:
    clock = ManualClock()
    broker = Broker(BrokerConfig(nodes=3, **config), None, clock=clock)  # type: ignore[arg-type]
    broker.open()
    return broker, clock


def test_topics_spread_replicas_and_leaders_over_nodes():
    broker, _ = _broker()
    topic = broker.topics.create("spread", 6, replication=3)
    assert topic is not None
    assert {ld.leader for ld in topic.leaders} == {0, 1, 2}
    assert all(sorted(ld.replicas) == [0, 1, 2] for ld in topic.leaders)
    assert all(ld.leader == ld.replicas[0] for ld in topic.leaders)


def test_replication_above_the_listed_nodes_is_refused():
    broker, _ = _broker()
    broker.cluster.stop(2, clean=True)
    with pytest.raises(Exception, match="replication factor 3 outside 1..2") as info:
        broker.topics.create("too-many", 1, replication=3)
    assert info.value.error_code == ErrorCode.invalid_replication_factor  # type: ignore[attr-defined]


def test_hard_stop_keeps_leadership_until_the_failure_is_detected():
    broker, _ = _broker()
    topic = broker.topics.create("t", 3, replication=3)
    assert topic is not None
    led = [ld for ld in topic.leaders if ld.leader == 1]
    epochs = [ld.leader_epoch for ld in led]
    broker.cluster.stop(1, clean=False)
    assert broker.nodes.listed(1) and not broker.nodes.running(1)
    assert [ld.leader for ld in led] == [1]  # Metadata still names it
    broker.cluster.fence(1)
    assert not broker.nodes.listed(1)
    for ld, epoch in zip(led, epochs, strict=True):
        assert ld.leader not in (1, NO_LEADER)
        assert ld.leader_epoch == epoch + 1
        assert broker.nodes.in_sync(ld.replicas) == tuple(r for r in ld.replicas if r != 1)


def test_clean_stop_moves_leaderships_before_the_node_goes():
    broker, _ = _broker()
    topic = broker.topics.create("t", 3, replication=2)
    single = broker.topics.create("single", 3, replication=1)
    assert topic is not None and single is not None
    broker.cluster.stop(0, clean=True)
    assert all(ld.leader != 0 for ld in topic.leaders)
    # a partition with no other replica has no leader: LEADER_NOT_AVAILABLE in Metadata
    only_on_0 = [ld for ld in single.leaders if ld.replicas == (0,)]
    assert only_on_0 and all(ld.leader == NO_LEADER for ld in only_on_0)
    broker.cluster.start(0)
    assert all(ld.leader == 0 for ld in only_on_0)  # the returning replica leads again
    assert all(ld.leader != 0 for ld in topic.leaders)  # no other leadership moves back


def test_move_leader_needs_a_running_replica():
    broker, _ = _broker()
    topic = broker.topics.create("t", 1, replication=2)
    assert topic is not None
    ld = topic.leaders[0]
    outsider = next(n for n in (0, 1, 2) if n not in ld.replicas)
    follower = next(n for n in ld.replicas if n != ld.leader)
    with pytest.raises(ValueError, match="not a replica"):
        broker.cluster.move_leader(ld, outsider)
    broker.cluster.stop(follower, clean=False)
    with pytest.raises(ValueError, match="stopped"):
        broker.cluster.move_leader(ld, follower)
    broker.cluster.start(follower)
    broker.cluster.move_leader(ld, follower)
    assert ld.leader == follower and ld.leader_epoch == 1


def test_coordinator_answers_follow_kafka():
    broker, clock = _broker(coordinator_load_ms=500)
    cluster = broker.cluster
    coord = cluster.coordinator(TXN_COORDINATOR, "tx")
    assert coord is cluster.internal[TXN_COORDINATOR][partition_for("tx", 50)]
    here = coord.leader
    elsewhere = next(n for n in (0, 1, 2) if n != here)
    assert cluster.coordinator_error(TXN_COORDINATOR, "tx", here, write=True) is None
    assert (
        cluster.coordinator_error(TXN_COORDINATOR, "tx", elsewhere, write=False)
        == ErrorCode.not_coordinator
    )
    cluster.move_leader(coord, elsewhere)  # loads for coordinator_load_ms
    assert (
        cluster.coordinator_error(TXN_COORDINATOR, "tx", elsewhere, write=False)
        == ErrorCode.coordinator_load_in_progress
    )
    assert (
        cluster.coordinator_error(TXN_COORDINATOR, "tx", here, write=False)
        == ErrorCode.not_coordinator
    )
    clock.advance(500)
    assert cluster.coordinator_error(TXN_COORDINATOR, "tx", elsewhere, write=True) is None


def test_transaction_coordinator_below_its_min_isr_cannot_write():
    broker, _ = _broker()  # __transaction_state: 3 replicas, min ISR 2
    coord = broker.cluster.coordinator(TXN_COORDINATOR, "tx")
    others = [n for n in (0, 1, 2) if n != coord.leader]
    broker.cluster.stop(others[0], clean=True)
    assert broker.cluster.coordinator_error(TXN_COORDINATOR, "tx", coord.leader, write=True) is None
    broker.cluster.stop(others[1], clean=True)
    code = broker.cluster.coordinator_error(TXN_COORDINATOR, "tx", coord.leader, write=True)
    assert code == ErrorCode.coordinator_not_available
    reads = broker.cluster.coordinator_error(TXN_COORDINATOR, "tx", coord.leader, write=False)
    assert reads is None


def test_a_coordinator_partition_without_a_replica_has_no_coordinator():
    broker, _ = _broker()
    for node in (0, 1, 2):
        broker.cluster.stop(node, clean=True)
    assert broker.cluster.coordinator(GROUP_COORDINATOR, "g").leader == NO_LEADER


def _ctx(broker: Broker, api_key: int, node: int) -> RequestContext:
    return RequestContext(
        broker=broker,
        api_key=api_key,
        version=1,
        client_id=None,
        client_host="h",
        node_id=node,
        connection=Connection(),
    )


@pytest.mark.parametrize("api_key", sorted(COORDINATED))
def test_every_coordinator_api_is_routed_by_its_key(api_key):
    broker, _ = _broker()
    key_type = COORDINATED[api_key][0]
    key = "the-key"
    req = SimpleNamespace(group_id=key, transactional_id=key, v3_and_below_transactional_id=key)
    leader = broker.cluster.coordinator(key_type, key).leader
    assert coordinator_answer(_ctx(broker, api_key, leader), req) is None
    for other in (n for n in (0, 1, 2) if n != leader):
        assert coordinator_answer(_ctx(broker, api_key, other), req) == ErrorCode.not_coordinator


def test_idempotent_init_producer_id_and_other_apis_go_to_any_node():
    broker, _ = _broker()
    idempotent = SimpleNamespace(transactional_id=None)
    empty = SimpleNamespace(transactional_id="")  # INVALID_REQUEST on any node
    for node in (0, 1, 2):
        assert coordinator_answer(_ctx(broker, 22, node), idempotent) is None
        assert coordinator_answer(_ctx(broker, 22, node), empty) is None
        assert coordinator_answer(_ctx(broker, 3, node), SimpleNamespace()) is None


def test_led_partition_answers_kafkas_codes():
    broker, _ = _broker()
    topic = broker.topics.create("t", 1, replication=3)
    assert topic is not None
    leader = topic.leaders[0].leader
    follower = next(n for n in (0, 1, 2) if n != leader)
    plog, code = _ctx(broker, 0, leader).led_partition("t", 0)
    assert plog is topic.partitions[0] and code == ErrorCode.none
    assert _ctx(broker, 0, follower).led_partition("t", 0) == (
        None,
        ErrorCode.not_leader_or_follower,
    )
    assert _ctx(broker, 0, leader).led_partition("t", 1) == (
        None,
        ErrorCode.unknown_topic_or_partition,
    )


def test_internal_topics_follow_the_configured_replication():
    config = BrokerConfig(nodes=5, transaction_state_replication_factor=4)
    assert config.txn_log_replication == 4
    assert config.txn_log_min_isr == 2
    assert config.offsets_log_replication == 3
    assert BrokerConfig(nodes=1).txn_log_min_isr == 1  # one node: min(2, 1)
    assert BrokerConfig(nodes=2).txn_log_replication == 2


@pytest.mark.parametrize(
    "kwargs",
    [
        {"nodes": 0},
        {"nodes": 2, "default_replication_factor": 3},
        {"nodes": 2, "transaction_state_replication_factor": 3},
        {"min_insync_replicas": 0},
        {"node_failure_detection_ms": -1},
        {"coordinator_load_ms": -1},
        {"node_id": -1},
    ],
)
def test_cluster_settings_are_validated(kwargs):
    with pytest.raises(BrokerConfigError):
        BrokerConfig(**kwargs)


def test_end_loading_ends_a_nodes_topic_loading_until_its_next_start():
    broker, clock = _broker(topic_load_delay_ms=60_000)
    assert not broker.topics_loaded(0) and not broker.topics_loaded(1)
    broker.end_loading(0)
    assert broker.topics_loaded(0) and not broker.topics_loaded(1)  # that node only
    clock.advance(1_000)
    broker.nodes.mark_started(0)  # started again: loads again for the whole delay
    assert not broker.topics_loaded(0)
    clock.advance(60_000)
    assert broker.topics_loaded(0) and broker.topics_loaded(1)


def test_node_op_round_trips_through_json_and_pickle():
    op = NodeOp(action="move-coordinator", node=2, coordinator="transaction", key="tx", load_ms=5)
    assert NodeOp.from_json(op.to_json()) == op
    assert pickle.loads(pickle.dumps(op)) == op


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ('{"action": "explode", "node": 1}', "unknown node operation"),
        ('{"action": "stop"}', "needs a node id"),
        ('{"action": "end-loading"}', "needs a node id"),
        ('{"action": "move-leader", "node": 1}', "needs a topic"),
        ('{"action": "move-coordinator", "node": 1, "coordinator": "x"}', "coordinator"),
        ('{"action": "stop", "node": 1, "force": true}', "fields of"),
        ("[1, 2]", "JSON object"),
        ("not json", "not JSON"),
        ('{"action": "stop", "node": "one"}', "node must be int"),
        ('{"action": "stop", "node": 1, "clean": 1}', "clean must be bool"),
    ],
)
def test_node_op_refuses_bad_lines(line, match):
    with pytest.raises(NodeOpError, match=match):
        NodeOp.from_json(line)
