"""Secured Kafka listeners for the suite: configured ones from the environment, else minikafka.

A secured listener is reached through a bootstrap address and librdkafka settings
(:class:`SecureKafka`). Where they come from, in this order:

1. ``KAFKA_SECURE_CONFIG``: one or more properties files (``key=value`` lines of librdkafka
   settings: ``security.protocol``, ``sasl.mechanism``, ``sasl.username``,
   ``sasl.password``, ``ssl.ca.location``, ...; several files separated by ``:``), one per
   listener. A file may hold ``bootstrap.servers``; else ``KAFKA_SECURE_BOOTSTRAP_SERVERS``
   is the address. Tests that need a kind of listener no file describes skip, saying so.
   docker/README.md shows a real broker configured this way.
2. Otherwise, for SASL_PLAINTEXT where a Docker engine answers, a testcontainers Kafka
   with a SASL_PLAINTEXT listener (``connectors.testing.containers.KafkaSasl``);
3. otherwise a minikafka broker per security protocol in a subprocess (started on first
   use, stopped at the end of the session), with throwaway certificates from
   :func:`connectors.testing._tls.make_tls_files`.

Started brokers have one user, :data:`TEST_USER`, with PLAIN and SCRAM credentials and a
password that is new in every session.

Tests receive only (bootstrap, settings): they never learn which broker is behind them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from connectors.testing._tls import TlsFiles, make_tls_files
from connectors.testing.containers import KafkaSasl, docker_answers, kafka_container
from minikafka import BrokerProcess, ListenerSecurity

SECURE_CONFIG_ENV = "KAFKA_SECURE_CONFIG"
SECURE_BOOTSTRAP_ENV = "KAFKA_SECURE_BOOTSTRAP_SERVERS"
# The user of the minikafka listeners (its password is drawn per session).
TEST_USER = "eos-test"
# What the `secure_kafka` fixture asks for: the protocol and mechanism most clusters use.
DEFAULT_PROTOCOL, DEFAULT_MECHANISM = "SASL_SSL", "SCRAM-SHA-512"
# librdkafka settings that carry credentials (dropped for "a client without credentials").
CREDENTIAL_KEYS = ("sasl.username", "sasl.password", "sasl.mechanism", "sasl.mechanisms")
# The JAAS login module a Java client names for each SASL mechanism with a user and password.
JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


class SecureKafka(NamedTuple):
    """A secured listener: its bootstrap address and the client settings it needs.

    ``settings`` holds librdkafka settings (no ``bootstrap.servers``); a client is built
    from ``{"bootstrap.servers": bootstrap, **settings}``.
    """

    bootstrap: str
    settings: dict[str, str]

    @property
    def protocol(self) -> str:
        """The ``security.protocol`` of the settings (PLAINTEXT when unset)."""
        return self.settings.get("security.protocol", "PLAINTEXT").upper()

    @property
    def mechanism(self) -> str | None:
        """The SASL mechanism of the settings (None on a listener without SASL)."""
        if not self.protocol.startswith("SASL_"):
            return None
        return self.settings.get("sasl.mechanism", self.settings.get("sasl.mechanisms", "GSSAPI"))

    def client_config(self, **overrides: str) -> dict[str, str]:
        """The whole client configuration, with ``overrides`` on top."""
        return {"bootstrap.servers": self.bootstrap, **self.settings, **overrides}


def read_properties(path: str | Path) -> dict[str, str]:
    """``key=value`` lines of a properties file (``#``/``!`` comments and blank lines skipped)."""
    out: dict[str, str] = {}
    for raw in Path(path).read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"{path}: expected key=value, got {line!r}")
        out[key.strip()] = value.strip()
    return out


def java_client_settings(settings: dict[str, str]) -> dict[str, str]:
    """``settings`` as a Java client's properties file spells them.

    The user and password become a ``sasl.jaas.config`` line of the mechanism's login
    module (what Kafka's own tools take with ``--command-config``); the rest is unchanged.
    """
    out = {k: v for k, v in settings.items() if k not in ("sasl.username", "sasl.password")}
    if "sasl.username" not in settings:
        return out
    mechanism = settings.get("sasl.mechanism", settings.get("sasl.mechanisms", "PLAIN")).upper()
    user, password = settings["sasl.username"], settings.get("sasl.password", "")
    if '"' in user + password:
        raise ValueError("a JAAS line cannot quote a user name or password holding '\"'")
    out["sasl.jaas.config"] = (
        f'{JAAS_MODULES[mechanism]} required username="{user}" password="{password}";'
    )
    return out


def write_command_config(settings: dict[str, str], path: Path) -> Path:
    """Write ``settings`` to ``path`` as a Java properties file (owner-readable only).

    Java's escapes: a backslash doubled; in keys also ``=``, ``:`` and blanks; a value's
    leading blank and line breaks escaped.
    """

    def escape(text: str, *, key: bool) -> str:
        text = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
        if key:
            return "".join(f"\\{c}" if c in "=: \t" else c for c in text)
        return "\\" + text if text[:1] in (" ", "\t") else text

    lines = [
        f"{escape(k, key=True)}={escape(v, key=False)}"
        for k, v in java_client_settings(settings).items()
    ]
    path.touch(mode=0o600)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def configured_listeners() -> list[SecureKafka] | None:
    """The listeners ``KAFKA_SECURE_CONFIG`` describes, or None when it is not set."""
    spec = os.environ.get(SECURE_CONFIG_ENV, "").strip()
    if not spec:
        return None
    listeners = []
    for path in spec.split(os.pathsep):
        settings = read_properties(path)
        bootstrap = settings.pop("bootstrap.servers", "") or os.environ.get(
            SECURE_BOOTSTRAP_ENV, ""
        )
        if not bootstrap:
            raise ValueError(
                f"{path} has no bootstrap.servers and {SECURE_BOOTSTRAP_ENV} is not set"
            )
        listeners.append(SecureKafka(bootstrap, settings))
    return listeners


@dataclass
class SecureListeners:
    """Secured listeners by (protocol, mechanism), configured or started on demand.

    Contract: :meth:`get` returns a listener of that kind or None when the configured
    listeners have none (never None without ``KAFKA_SECURE_CONFIG``: a broker of that
    protocol is started, once per protocol, with every SASL mechanism enabled);
    :meth:`close` stops what was started.
    """

    workdir: Path
    configured: list[SecureKafka] | None = None
    password: str = field(default_factory=lambda: f"eos-pw-{secrets.token_hex(12)}")
    _tls: TlsFiles | None = None
    _brokers: dict[str, BrokerProcess] = field(default_factory=dict)
    _container_bootstrap: str | None = None
    _docker: bool | None = None
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def get(self, protocol: str, mechanism: str | None = None) -> SecureKafka | None:
        """A listener with ``protocol`` (and SASL ``mechanism``), or None if none is configured."""
        if self.configured is not None:
            for listener in self.configured:
                if listener.protocol == protocol and listener.mechanism == mechanism:
                    return listener
            return None
        if protocol == "SASL_PLAINTEXT" and mechanism is not None and self._use_docker():
            sasl = KafkaSasl(TEST_USER, self.password)
            return SecureKafka(self._container(sasl), sasl.client_settings(mechanism))
        broker = self._broker(protocol)
        settings = {"security.protocol": protocol}
        if mechanism is not None:
            settings |= {
                "sasl.mechanism": mechanism,
                "sasl.username": TEST_USER,
                "sasl.password": self.password,
            }
        if self._tls is not None and protocol.endswith("SSL"):
            settings["ssl.ca.location"] = self._tls.ca_file
        return SecureKafka(broker.bootstrap_servers, settings)

    def _use_docker(self) -> bool:
        if self._docker is None:
            self._docker = docker_answers()
        return self._docker

    def _container(self, sasl: KafkaSasl) -> str:
        if self._container_bootstrap is None:
            container = self._stack.enter_context(kafka_container(sasl=sasl))
            self._container_bootstrap = container.get_bootstrap_server()
        return self._container_bootstrap

    def _broker(self, protocol: str) -> BrokerProcess:
        if protocol not in self._brokers:
            tls = protocol.endswith("SSL")
            if tls and self._tls is None:
                self._tls = make_tls_files(self.workdir)
            sasl = protocol.startswith("SASL_")
            security = ListenerSecurity(
                protocol=protocol,
                users={TEST_USER: self.password} if sasl else {},
                certfile=self._tls.cert_file if tls and self._tls else None,
                keyfile=self._tls.key_file if tls and self._tls else None,
            )
            broker = BrokerProcess(security=security)
            self._brokers[protocol] = self._stack.enter_context(broker)
        return self._brokers[protocol]

    def close(self) -> None:
        """Stop the brokers this object started."""
        self._stack.close()
