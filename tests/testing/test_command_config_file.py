"""The suite's ``--command-config`` writer: what it writes, ``eos`` reads back as given."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.ops._properties import librdkafka_names, load_properties
from integration_tests.support.secure_kafka import java_client_settings, write_command_config

SETTINGS = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "app user",
    "sasl.password": r" p\w=d:#!x",
    "ssl.ca.location": "/tmp/ca dir/ca.pem",
}


def test_the_file_reads_back_as_the_same_librdkafka_settings(tmp_path: Path) -> None:
    path = write_command_config(SETTINGS, tmp_path / "client.properties")
    assert path.stat().st_mode & 0o077 == 0  # the password: owner-readable only
    text = path.read_text(encoding="utf-8")
    assert "sasl.password" not in text and "ScramLoginModule required" in text
    assert librdkafka_names(load_properties(str(path))) == SETTINGS


@pytest.mark.parametrize(
    ("mechanism", "module"), [("PLAIN", "PlainLoginModule"), ("SCRAM-SHA-256", "ScramLoginModule")]
)
def test_each_mechanism_gets_its_login_module(mechanism: str, module: str) -> None:
    java = java_client_settings({**SETTINGS, "sasl.mechanism": mechanism})
    assert f".{module} required" in java["sasl.jaas.config"]


def test_settings_without_a_user_are_written_as_they_are() -> None:
    tls_only = {"security.protocol": "SSL", "ssl.ca.location": "/ca.pem"}
    assert java_client_settings(tls_only) == tls_only
