"""``eos``'s client settings: ``--command-config`` (Java properties) and ``EOS_KAFKA_*``.

Unit tests of ``connectors.ops._properties`` (the parser against what
``java.util.Properties.load`` returns for the same text) and of the CLI's wiring: every
subcommand gets the one cluster the settings describe. The commands' work is replaced by a
recorder (no broker here); integration_tests/ops/test_eos_cli.py runs them for real.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from connectors.kafka._client import Cluster
from connectors.ops import _cli
from connectors.ops._commands import COMMANDS
from connectors.ops._properties import (
    PropertiesError,
    command_cluster,
    environment_settings,
    librdkafka_names,
    parse_properties,
)
from connectors.ops._result import Result

JAVA_STYLE = r"""
# Kafka's own tools take this file as --command-config
! a comment too
security.protocol=SASL_SSL
sasl.mechanism : SCRAM-SHA-512
client.id   eos-ops
ssl.ca.location=/etc/kafka/ca.pem
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \
    username="ops" \
    password="p=ss;w0rd";
key\ with\ spaces = a\tb\u0041
empty
trailing=value\\
"""


def test_the_java_properties_format() -> None:
    assert parse_properties(JAVA_STYLE) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "client.id": "eos-ops",
        "ssl.ca.location": "/etc/kafka/ca.pem",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="ops" password="p=ss;w0rd";',
        "key with spaces": "a\tbA",
        "empty": "",
        "trailing": "value\\",
    }


def test_a_continued_line_keeps_a_hash_as_data_and_an_escaped_separator_in_the_key() -> None:
    assert parse_properties("a=1\\\n  # not a comment\nb\\=c:d\n") == {
        "a": "1# not a comment",
        "b=c": "d",
    }


def test_jaas_lines_of_plain_and_scram_become_librdkafka_settings() -> None:
    settings = librdkafka_names(parse_properties(JAVA_STYLE))
    assert settings["sasl.username"] == "ops" and settings["sasl.password"] == "p=ss;w0rd"
    assert "sasl.jaas.config" not in settings


@pytest.mark.parametrize(
    ("settings", "needle"),
    [
        (
            {"sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;"},
            "sasl.kerberos",
        ),
        ({"ssl.truststore.location": "/x.jks"}, "ssl.ca.location"),
        ({"sasl.jaas.config": 'x.PlainLoginModule required username="u";'}, "password"),
    ],
)
def test_java_only_settings_name_what_librdkafka_takes(
    settings: dict[str, str], needle: str
) -> None:
    with pytest.raises(PropertiesError, match=needle) as info:
        librdkafka_names(settings)
    assert "/x.jks" not in str(info.value) or needle == "ssl.ca.location"


def test_environment_variables_spell_settings_as_confluent_images_do() -> None:
    env = {
        "EOS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "EOS_KAFKA_SASL_PASSWORD": "pw",
        "EOS_KAFKA_SASL_OAUTHBEARER_CLIENT_ID": "cid",
        "EOS_KAFKA_SOME__UNDERSCORED_NAME": "x",
        "EOS_KAFKA_": "ignored",
        "PATH": "/bin",
    }
    assert environment_settings(env) == {
        "security.protocol": "SASL_SSL",
        "sasl.password": "pw",
        "sasl.oauthbearer.client.id": "cid",
        "some_underscored.name": "x",
    }


def test_the_file_wins_over_the_environment_and_may_carry_the_address(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("bootstrap.servers=h:9093\nclient.id=from-file\n")
    env = {"EOS_KAFKA_CLIENT_ID": "from-env", "EOS_KAFKA_SOCKET_TIMEOUT_MS": "5000"}
    cluster = command_cluster(None, str(path), env)
    assert cluster.bootstrap_servers == "h:9093"
    assert cluster.config.as_dict() == {"client.id": "from-file", "socket.timeout.ms": "5000"}
    assert command_cluster("other:1", str(path), env).bootstrap_servers == "other:1"
    with pytest.raises(PropertiesError, match="bootstrap-servers"):
        command_cluster(None, None, {})
    with pytest.raises(PropertiesError, match="cannot read"):
        command_cluster("h:1", str(tmp_path / "missing.properties"), {})


def test_bad_settings_exit_2_without_quoting_a_secret(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "bad.properties"
    path.write_text("sasl.password=SENTINEL-eos-1\nisolation.level=read_committed\n")
    assert (
        _cli.main(["--bootstrap-servers", "h:1", "--command-config", str(path), "status", "s"]) == 2
    )
    err = capsys.readouterr().err
    assert "isolation.level" in err and "managed by the kit" in err and "SENTINEL" not in err


SUBCOMMANDS = {
    "status": ["status", "s1"],
    "abort-lingering": ["abort-lingering", "s1", "--dry-run"],
    "offsets": ["offsets", "s1"],
    "reset": ["reset", "s1"],
    "preflight": ["preflight", "--topic", "t", "--sink-id", "s1"],
    "verify": ["verify", "--input-topic", "i", "--output-topic", "o", "--sink-id", "s1"],
}


def test_every_subcommand_is_dispatched_once_by_one_table() -> None:
    assert set(COMMANDS) == set(SUBCOMMANDS)


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_every_subcommand_gets_the_command_config(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nclient.id=eos-test\n")
    monkeypatch.setenv("EOS_KAFKA_SASL_USERNAME", "ops")
    monkeypatch.setenv("EOS_KAFKA_SASL_PASSWORD", "SENTINEL-eos-2")
    seen: list[Cluster] = []
    monkeypatch.setattr(_cli, "connect_admin", seen.append)
    argv = SUBCOMMANDS[name]

    def record(args: argparse.Namespace, cluster: Cluster | None) -> Result:
        assert args.command == name
        seen.extend([cluster] if cluster is not None else [])
        return Result(data={"seen": 1})

    monkeypatch.setitem(COMMANDS, name, record)
    code = _cli.main(
        ["--bootstrap-servers", "h:9093", "--json", "--command-config", str(path), *argv]
    )
    assert code == 0, capsys.readouterr()
    assert len(seen) == 2, "the first contact and the command itself"
    want = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "client.id": "eos-test",
        "sasl.username": "ops",
        "sasl.password": "SENTINEL-eos-2",
    }
    for cluster in seen:
        assert cluster.bootstrap_servers == "h:9093" and cluster.config.as_dict() == want
    assert "SENTINEL" not in capsys.readouterr().out
