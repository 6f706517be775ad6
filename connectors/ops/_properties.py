r"""``eos``'s client settings: a Java properties file (``--command-config``) and the environment.

Kafka's own command-line tools take their security settings as a ``--command-config`` file
in the format of ``java.util.Properties``; ``eos`` reads the same files:

1. :func:`parse_properties`: logical lines (a line ending in an odd number of backslashes
   continues on the next one, whose leading blanks are dropped); blank lines and lines
   whose first non-blank character is ``#`` or ``!`` are comments; the key ends at the
   first unescaped ``=``, ``:`` or blank, then blanks, at most one ``=`` or ``:`` and
   blanks separate it from the value; escapes ``\t \n \r \f \uXXXX`` and ``\x`` for
   any other character ``x``;
2. :func:`environment_settings`: every variable ``EOS_KAFKA_<NAME>`` is the setting whose
   name is ``<NAME>`` lower-cased with ``_`` read as ``.`` and ``__`` as ``_`` (Confluent's
   Docker images spell settings so): ``EOS_KAFKA_SASL_PASSWORD`` is ``sasl.password``;
3. :func:`librdkafka_names`: settings only Java clients know are translated or refused
   with what to use: ``sasl.jaas.config`` of the ``PlainLoginModule`` or
   ``ScramLoginModule`` becomes ``sasl.username`` / ``sasl.password``; Java key and trust
   stores name librdkafka's PEM settings.

The command line wins over the environment: a file's setting replaces the variable's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from connectors.kafka import _client
from connectors.kafka._client import Cluster, cluster_of

ENV_PREFIX = "EOS_KAFKA_"
# How errors name where eos's client settings come from.
CONFIG_OPTION = "--command-config (or the EOS_KAFKA_* variables)"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_BLANK = " \t\f"
# ``username="u"`` / ``password='p'`` options of a JAAS login module line.
_JAAS_OPTION = re.compile(r"""(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|([^\s;]+))""")
_JAAS_MODULES = ("PlainLoginModule", "ScramLoginModule")
# Java-only settings and what librdkafka takes instead.
_JAVA_ONLY = {
    "ssl.truststore.location": "ssl.ca.location (a PEM file of the CA certificates)",
    "ssl.truststore.password": "ssl.ca.location (a PEM file needs no password)",
    "ssl.truststore.type": "ssl.ca.location (a PEM file)",
    "ssl.keystore.type": "ssl.keystore.location (PKCS#12) or ssl.certificate.location and "
    "ssl.key.location (PEM)",
    "sasl.login.callback.handler.class": "librdkafka's own OAUTHBEARER settings "
    "(sasl.oauthbearer.*); see docs/deploying.md",
    "sasl.client.callback.handler.class": "librdkafka's own SASL settings (sasl.*)",
}


class PropertiesError(ValueError):
    """A ``--command-config`` file or an ``EOS_KAFKA_*`` variable cannot be used."""


def parse_properties(text: str) -> dict[str, str]:
    """Return the key/value pairs of ``text`` in Java properties format (module doc)."""
    out: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split(line)
        out[_unescape(key)] = _unescape(value)
    return out


def _logical_lines(text: str) -> list[str]:
    lines, pending = [], ""
    continuing = False
    for natural in text.splitlines():
        stripped = natural.lstrip(_BLANK)
        if not continuing and (not stripped or stripped[0] in "#!"):
            continue
        backslashes = len(stripped) - len(stripped.rstrip("\\"))
        if backslashes % 2:
            pending += stripped[:-1]
            continuing = True
            continue
        lines.append(pending + stripped)
        pending, continuing = "", False
    if continuing and pending:
        lines.append(pending)
    return [line for line in lines if line]


def _split(line: str) -> tuple[str, str]:
    """Split a logical line into its raw key and raw value (escapes still in place)."""
    i = 0
    while i < len(line) and line[i] not in "=:" + _BLANK:
        i += 2 if line[i] == "\\" else 1
    key, rest = line[:i], line[i:].lstrip(_BLANK)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_BLANK)
    return key, rest


def _unescape(raw: str) -> str:
    out, i = [], 0
    while i < len(raw):
        ch = raw[i]
        if ch != "\\" or i + 1 == len(raw):
            out.append(ch if ch != "\\" else "")
            i += 1
            continue
        nxt = raw[i + 1]
        if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", raw[i + 2 : i + 6]):
            out.append(chr(int(raw[i + 2 : i + 6], 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def load_properties(path: str) -> dict[str, str]:
    """Read the properties file ``path`` (UTF-8, else ISO-8859-1 as ``java.util.Properties``).

    Raises:
        PropertiesError: the file cannot be read.

    """
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        msg = f"--command-config {path}: cannot read the file ({exc.strerror})"
        raise PropertiesError(msg) from None
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    return parse_properties(text)


def environment_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """Return the settings of the ``EOS_KAFKA_*`` variables of ``environ`` (module doc)."""
    out = {}
    for name, value in environ.items():
        if name.startswith(ENV_PREFIX) and len(name) > len(ENV_PREFIX):
            parts = name[len(ENV_PREFIX) :].lower().split("__")
            out["_".join(p.replace("_", ".") for p in parts)] = value
    return out


def environment_variables(settings: Mapping[str, str]) -> dict[str, str]:
    """Return the ``EOS_KAFKA_*`` variables that spell ``settings``.

    The inverse of :func:`environment_settings`: how a parent hands client settings to a
    child process without writing them to a file.
    """
    return {
        ENV_PREFIX + key.replace("_", "__").replace(".", "_").upper(): value
        for key, value in settings.items()
    }


def librdkafka_names(settings: Mapping[str, str]) -> dict[str, str]:
    """Return ``settings`` with Java-only settings translated (module doc, step 3).

    Raises:
        PropertiesError: a Java-only setting with no librdkafka equivalent here; the
            message names what to use instead (never the setting's value).

    """
    out = dict(settings)
    jaas = out.pop("sasl.jaas.config", None)
    if jaas is not None:
        out.update(_from_jaas(jaas))
    for key, instead in _JAVA_ONLY.items():
        if key in out:
            msg = f"{key} is a setting of Java clients only; librdkafka takes {instead}"
            raise PropertiesError(msg)
    return out


def _from_jaas(jaas: str) -> dict[str, str]:
    """``sasl.username`` / ``sasl.password`` of a PLAIN or SCRAM JAAS line."""
    if not any(module in jaas for module in _JAAS_MODULES):
        msg = (
            "sasl.jaas.config names a login module librdkafka cannot take from a JAAS line "
            "(only PlainLoginModule and ScramLoginModule are translated); give librdkafka's "
            "settings instead (sasl.mechanism, sasl.kerberos.*, sasl.oauthbearer.*)"
        )
        raise PropertiesError(msg)
    options = {
        m.group(1): next(g for g in m.groups()[1:] if g is not None)
        for m in _JAAS_OPTION.finditer(jaas.split("required", 1)[-1])
    }
    if "username" not in options or "password" not in options:
        msg = 'sasl.jaas.config has no username="..." and password="..." options'
        raise PropertiesError(msg)
    return {"sasl.username": options["username"], "sasl.password": options["password"]}


def command_cluster(
    bootstrap: str | None, command_config: str | None, environ: Mapping[str, str]
) -> Cluster:
    """Return the cluster every client of an ``eos`` command connects to.

    Settings: the ``EOS_KAFKA_*`` variables, then the ``--command-config`` file over them,
    translated (:func:`librdkafka_names`) and validated like a sink's ``client_config``.
    The address: ``bootstrap`` (``--bootstrap-servers`` or ``$KAFKA_BOOTSTRAP_SERVERS``),
    else the settings' own address setting (a Java tool's file may carry one).

    Raises:
        PropertiesError: a file that cannot be read, a Java-only setting, no address.
        KafkaCode.CLIENT_CONFIG: a setting librdkafka or the kit refuses.

    """
    settings = environment_settings(environ)
    if command_config:
        settings.update(load_properties(command_config))
    settings = librdkafka_names(settings)
    address = bootstrap or settings.get(_client.BOOTSTRAP)
    settings.pop(_client.BOOTSTRAP, None)
    if not address:
        msg = "--bootstrap-servers (or $KAFKA_BOOTSTRAP_SERVERS) is required"
        raise PropertiesError(msg)
    return cluster_of(
        address,
        settings,
        address_option="--bootstrap-servers",
        config_option=CONFIG_OPTION,
    )
