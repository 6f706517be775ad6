"""The cluster settings exactly-once needs to survive a broker failure, in one place.

Two owners:

* :class:`StateTopicDurability`: the replication and ``min.insync.replicas`` the kit
  gives the topics it creates for its own state (the epoch log, the markers): by default
  ``min(3, brokers)`` replicas and ``min(2, replication)`` in-sync replicas, or what the
  user chose (validated at construction, no network I/O).
* :class:`DurabilityRules`: the rule set the sink's preflight and ``eos preflight`` check
  an output topic and the broker's transaction state log against. Each rule is a named
  predicate on one setting; a setting that breaks it is a :class:`DurabilityFinding`,
  one line naming the setting, its value and the fix. Findings are warnings, or one
  ``KafkaCode.PREFLIGHT`` when the user asks for strict checks.

Why these values: with replication below 3, or ``min.insync.replicas`` below 2, an
acknowledged write can live on one broker only, and losing that broker loses a committed
transaction; with unclean leader election on, an out-of-sync replica can become leader and
drop acknowledged records. Either voids exactly-once (Kafka's documentation says so for
the transaction state log too).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ClusterMetadata,
    ConfigResource,
)

from connectors.kafka._client._classify import access_error
from connectors.kafka._errors import KafkaCode, KafkaConnectorError
from txn import TxnCode

_log = logging.getLogger("connectors.kafka")

# Replicas and in-sync replicas exactly-once needs (Kafka's recommended production values).
WANTED_REPLICATION = 3
WANTED_MIN_INSYNC_REPLICAS = 2
# Seconds for one DescribeConfigs or Metadata request of the checks.
DESCRIBE_TIMEOUT_S = 30.0
# The sink options that override StateTopicDurability (named in its errors).
REPLICATION_OPTION = "state_topic_replication"
MIN_ISR_OPTION = "state_topic_min_insync_replicas"


def _positive(option: str, value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        msg = f"{option} must be an int >= 1 (or None for the default), got {value!r}"
        raise KafkaConnectorError(msg, code=TxnCode.CONFIG)
    return value


@dataclass(frozen=True)
class StateTopicDurability:
    """Replication and ``min.insync.replicas`` of the topics the kit creates for its state.

    None means the default: ``min(3, brokers)`` replicas, ``min(2, replication)`` in-sync
    replicas. Frozen and picklable (part of a sink's config).

    Raises:
        TxnCode.CONFIG: a value is not a positive int, or min ISR exceeds replication.

    """

    replication: int | None = None
    min_insync_replicas: int | None = None

    def __post_init__(self) -> None:
        replication = _positive(REPLICATION_OPTION, self.replication)
        min_isr = _positive(MIN_ISR_OPTION, self.min_insync_replicas)
        if replication is not None and min_isr is not None and min_isr > replication:
            msg = (
                f"{MIN_ISR_OPTION}={min_isr} exceeds {REPLICATION_OPTION}={replication}: "
                "no write could be acknowledged; lower it"
            )
            raise KafkaConnectorError(msg, code=TxnCode.CONFIG)

    def settle(self, brokers: int) -> tuple[int, int]:
        """Return (replication, min.insync.replicas) for a cluster of ``brokers`` brokers.

        Raises:
            KafkaCode.PREFLIGHT: the chosen min ISR exceeds the replication the cluster allows.

        """
        replication = self.replication or min(WANTED_REPLICATION, brokers)
        min_isr = self.min_insync_replicas or min(WANTED_MIN_INSYNC_REPLICAS, replication)
        if min_isr > replication:
            msg = (
                f"{MIN_ISR_OPTION}={min_isr} exceeds the replication {replication} of a "
                f"cluster of {brokers} broker(s); lower it or set {REPLICATION_OPTION}"
            )
            raise KafkaConnectorError(msg, code=KafkaCode.PREFLIGHT)
        return replication, min_isr


# -- the rule set ----------------------------------------------------------------------


def replicated_enough(value: str) -> bool:
    """Whether a replication factor keeps a committed write through one broker's loss."""
    return int(value) >= WANTED_REPLICATION


def enough_insync_replicas(value: str) -> bool:
    """Whether a min ISR makes every acknowledged write live on at least two brokers."""
    return int(value) >= WANTED_MIN_INSYNC_REPLICAS


def unclean_election_off(value: str) -> bool:
    """Whether an out-of-sync replica is kept from becoming leader (and dropping records)."""
    return value.strip().lower() != "true"


@dataclass(frozen=True)
class Rule:
    """One setting, the named predicate its value must satisfy, and how to fix it."""

    setting: str
    holds: Callable[[str], bool]
    fix: str


@dataclass(frozen=True, kw_only=True)
class DurabilityFinding:
    """A setting weaker than exactly-once needs: where, which, its value and the fix."""

    subject: str
    setting: str
    value: str
    fix: str

    def line(self) -> str:
        """One line for a log or a report (names and values of settings only: no secret)."""
        return (
            f"{self.subject}: {self.setting}={self.value} is weaker than exactly-once needs; "
            f"{self.fix}"
        )


_TOPIC_CONFIGS_COMMAND = "kafka-configs.sh --alter --entity-type topics --entity-name {topic}"
_BROKER_FILE = "in every broker's server.properties"


class DurabilityRules:
    """The durability rule set of exactly-once, and the one way to check a cluster with it.

    Topic rules apply to each output topic (``replication.factor`` is read from Metadata,
    the others with DescribeConfigs); broker rules to the settings of the transaction
    state log, read from one broker. A setting the cluster does not report is not checked.
    """

    topic_rules = (
        Rule(
            "replication.factor",
            replicated_enough,
            f"recreate the topic with replication factor {WANTED_REPLICATION}, or add "
            "replicas with kafka-reassign-partitions.sh",
        ),
        Rule(
            "min.insync.replicas",
            enough_insync_replicas,
            f"{_TOPIC_CONFIGS_COMMAND} --add-config "
            f"min.insync.replicas={WANTED_MIN_INSYNC_REPLICAS}",
        ),
        Rule(
            "unclean.leader.election.enable",
            unclean_election_off,
            f"{_TOPIC_CONFIGS_COMMAND} --add-config unclean.leader.election.enable=false",
        ),
    )
    broker_rules = (
        Rule(
            "transaction.state.log.replication.factor",
            replicated_enough,
            f"set transaction.state.log.replication.factor={WANTED_REPLICATION} "
            f"{_BROKER_FILE} (an existing __transaction_state topic keeps its replicas: "
            "add them with kafka-reassign-partitions.sh)",
        ),
        Rule(
            "transaction.state.log.min.isr",
            enough_insync_replicas,
            f"set transaction.state.log.min.isr={WANTED_MIN_INSYNC_REPLICAS} {_BROKER_FILE}",
        ),
    )

    def check(self, admin: AdminClient, topics: Iterable[str]) -> list[DurabilityFinding]:
        """Return every finding on ``topics`` and the broker (network I/O).

        Raises:
            KafkaCode.AUTHORIZATION: DescribeConfigs was refused (the message names the ACL).
            KafkaCode.PREFLIGHT: the cluster did not answer the requests.

        """
        try:
            metadata = admin.list_topics(timeout=DESCRIBE_TIMEOUT_S)
            found = []
            for topic in sorted(set(topics)):
                found += self._topic_findings(admin, topic, _replication(metadata, topic))
            broker = str(next(iter(metadata.brokers)))
            settings = _describe(admin, "BROKER", broker)
            found += _broken(self.broker_rules, settings, f"broker {broker}", {})
        except (KafkaException, StopIteration) as exc:
            denied = access_error(exc, "reading topic and broker configurations")
            if denied is not None:
                raise denied from exc
            msg = f"cannot read topic and broker configurations to check durability ({exc})"
            raise KafkaConnectorError(msg, code=KafkaCode.PREFLIGHT) from exc
        return found

    def _topic_findings(
        self, admin: AdminClient, topic: str, replication: int | None
    ) -> list[DurabilityFinding]:
        settings = _describe(admin, "TOPIC", topic)
        if replication is not None:
            settings["replication.factor"] = str(replication)
        return _broken(self.topic_rules, settings, f"topic {topic!r}", {"topic": topic})

    @staticmethod
    def enforce(findings: list[DurabilityFinding], *, strict: bool, option: str) -> None:
        """Log each finding as a warning, or raise them together when ``strict``.

        Raises:
            KafkaCode.PREFLIGHT: ``strict`` and there are findings (the message says how to
                accept the settings instead: ``option``).

        """
        if not findings:
            return
        if strict:
            lines = "; ".join(f.line() for f in findings)
            msg = (
                f"the cluster is weaker than exactly-once needs: {lines} "
                f"(or pass {option}=False to accept these settings with warnings)"
            )
            raise KafkaConnectorError(msg, code=KafkaCode.PREFLIGHT)
        for finding in findings:
            _log.warning("%s", finding.line())


def _replication(metadata: ClusterMetadata, topic: str) -> int | None:
    """Return the smallest replica count of ``topic``'s partitions (None if absent)."""
    entry = metadata.topics.get(topic)
    if entry is None or entry.error is not None or not entry.partitions:
        return None
    return min(len(p.replicas) for p in entry.partitions.values())


def _describe(admin: AdminClient, kind: str, name: str) -> dict[str, str]:
    """Return the settings DescribeConfigs reports of resource ``kind`` (TOPIC, BROKER)."""
    resource = ConfigResource(kind, name)
    result = admin.describe_configs([resource], request_timeout=DESCRIBE_TIMEOUT_S)
    configs = result[resource].result(timeout=DESCRIBE_TIMEOUT_S)
    return {k: str(v.value) for k, v in configs.items() if v.value is not None}


def _broken(
    rules: Iterable[Rule], settings: dict[str, str], subject: str, names: dict[str, str]
) -> list[DurabilityFinding]:
    return [
        DurabilityFinding(
            subject=subject,
            setting=rule.setting,
            value=settings[rule.setting],
            fix=rule.fix.format(**names),
        )
        for rule in rules
        if rule.setting in settings and not rule.holds(settings[rule.setting])
    ]
