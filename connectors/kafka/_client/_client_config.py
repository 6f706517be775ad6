"""Validation of user-given librdkafka settings (``client_config``, ``producer_config``).

``client_config`` holds what every client of a sink, a command or the checker shares
(``security.protocol``, ``sasl.*``, ``ssl.*``, ``client.id``, ``socket.*``, ...);
``producer_config`` holds settings of the sink's write producers only, on top of it.
:func:`librdkafka_settings` checks either at construction, without network I/O:

1. a mapping of string names to strings, numbers or bools (they travel to Spark tasks;
   ``oauth_cb`` alone may be a function, kept as its ``"package.module:function"`` name);
2. no setting the kit owns (:data:`OWNED`, plus the caller's ``owned``): each is an error
   naming what to use instead;
3. librdkafka parses the result (an unconnected producer: no address, no connection).

Error messages never quote a secret value (``_secrets``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaException

from connectors.kafka._client import _clients, _secrets
from connectors.kafka._client._clients import Cluster
from connectors.kafka._client._secrets import Settings
from connectors.kafka._errors import client_config_error

# A user's ``client_config`` as the kit's functions take it (None: no shared settings).
ClientConfig = Mapping[str, object] | Settings | None

# Settings the kit sets itself on the clients that need them; a user value would break
# the protocol or be ignored. Each says what to use instead ("{address}": the option
# holding the address; a name ending in "." refuses every setting it prefixes).
_MANAGED = "is managed by the kit: "
OWNED: dict[str, str] = {
    _clients.BOOTSTRAP: _MANAGED + "give the cluster's address as {address}",
    "transactional.id": _MANAGED + "the sink derives it from sink_id ({{sink_id}}-{{partition}})",
    "transaction.timeout.ms": _MANAGED + "pass transaction_timeout_ms= to KafkaSink",
    "enable.idempotence": _MANAGED + "the kit turns it on for every producer (every guarantee)",
    "isolation.level": _MANAGED + "each reader chooses it (markers and logs read committed data)",
    "group.id": _MANAGED + "the kit names its consumer groups after the sink_id",
    "group.instance.id": _MANAGED + "the kit's consumers never join a group",
    "enable.auto.commit": _MANAGED + "the kit's consumers never commit on their own",
    "enable.auto.offset.store": _MANAGED + "the kit's consumers never commit on their own",
    "enable.partition.eof": _MANAGED + "each reader of the kit chooses it",
    "auto.offset.reset": _MANAGED + "each reader of the kit chooses its start",
    "on_delivery": _MANAGED + "the sink installs its own delivery callback",
    "error_cb": _MANAGED + "the kit installs its own error callback where it needs one",
    "logger": _MANAGED + "librdkafka's lines go to the Python logger connectors.kafka.librdkafka",
}


def librdkafka_settings(
    raw: object,
    *,
    option: str,
    error: Callable[[str], Exception],
    owned: Mapping[str, str] | None = None,
    address: str = "bootstrap_servers",
    base: Mapping[str, str] | None = None,
) -> Settings:
    """Validate ``raw`` (steps in the module doc) and return it as :class:`Settings`.

    ``option`` names the option in messages; ``error`` builds the typed error raised;
    ``owned`` adds settings the caller refuses (name or ``prefix.`` -> the rest of the
    message); ``address``
    names where the address goes; ``base`` are settings librdkafka parses together with
    ``raw`` (a producer's defaults).

    Raises:
        Exception: of ``error``'s type, naming the setting and what to do.

    """
    if raw is None:
        return Settings()
    if isinstance(raw, Settings):
        raw = raw.as_dict()
    elif isinstance(raw, tuple):
        raw = dict(raw)
    if not isinstance(raw, Mapping):
        msg = f"{option} must be a mapping of librdkafka settings, got {type(raw).__name__}"
        raise error(msg)
    refused = {**OWNED, **(owned or {})}
    items: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not key:
            msg = f"{option} keys must be librdkafka setting names (strings), got {key!r}"
            raise error(msg)
        hint = _refusal(refused, key)
        if hint is not None:
            msg = f"{option}[{key!r}] {hint.format(address=address)}"
            raise error(msg)
        items[key] = _text(option, key, value, error)
    _check_librdkafka_accepts(option, {**(base or {}), **items}, error)
    return Settings(tuple(items.items()))


def cluster_of(
    bootstrap_servers: str,
    client_config: ClientConfig,
    *,
    address_option: str = "bootstrap_servers",
    config_option: str = "client_config",
    owned: Mapping[str, str] | None = None,
) -> Cluster:
    """Return the :class:`Cluster` of an address and a user's ``client_config``.

    Raises:
        KafkaCode.CLIENT_CONFIG: ``client_config`` is invalid (the message names the setting).

    """
    settings = librdkafka_settings(
        client_config,
        option=config_option,
        error=client_config_error,
        owned=owned,
        address=address_option,
    )
    return Cluster(
        bootstrap_servers=bootstrap_servers,
        config=settings,
        address_option=address_option,
        config_option=config_option,
    )


def kafka_options(bootstrap_servers: str, client_config: ClientConfig = None) -> dict[str, str]:
    """Return the address and ``client_config`` as Spark's ``kafka.``-prefixed options.

    For the ``kafka-rc`` source (``.options(**kafka_options(...))``): one ``client_config``
    serves the sink and the source. Validated like the sink's option.

    Raises:
        KafkaCode.CLIENT_CONFIG: ``client_config`` is invalid (the message names the setting).

    """
    return cluster_of(bootstrap_servers, client_config).spark_options()


def _refusal(refused: Mapping[str, str], key: str) -> str | None:
    """Return why ``key`` is refused: an exact name, or a name prefix ending in ``.``."""
    if key in refused:
        return refused[key]
    return next((h for p, h in refused.items() if p.endswith(".") and key.startswith(p)), None)


def _text(option: str, key: str, value: object, error: Callable[[str], Exception]) -> str:
    """Return ``value`` as librdkafka's string form (a callback as its import name)."""
    if key in _clients.CALLBACK_SETTINGS:
        return _callback_name(option, key, value, error)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    msg = (
        f"{option}[{key!r}] must be a string, number or bool (callbacks and objects "
        f"cannot be shipped to Spark tasks), got {type(value).__name__}"
    )
    raise error(msg)


def _callback_name(option: str, key: str, value: object, error: Callable[[str], Exception]) -> str:
    if isinstance(value, str):
        name = value
    else:
        module = getattr(value, "__module__", None)
        qualname = getattr(value, "__qualname__", "")
        name = f"{module}:{qualname}"
        if module in (None, "__main__") or "<" in qualname:
            msg = (
                f"{option}[{key!r}] must be a module-level function (Spark tasks import it "
                f"by name) or its name 'package.module:function', got {value!r}"
            )
            raise error(msg)
    try:
        _clients.load_callback(name)
    except (ImportError, ValueError) as exc:
        msg = f"{option}[{key!r}]: cannot import {name!r} ({exc})"
        raise error(msg) from None
    return name


def _check_librdkafka_accepts(
    option: str, settings: Mapping[str, Any], error: Callable[[str], Exception]
) -> None:
    """Let librdkafka parse ``settings``: with no address it opens no connection.

    Callbacks are left out: confluent-kafka calls ``oauth_cb`` at construction (network
    I/O to a token endpoint); :func:`_callback_name` checked that it imports.
    """
    parsed = {k: v for k, v in settings.items() if k not in _clients.CALLBACK_SETTINGS}
    try:
        producer = _clients.unconnected_producer(parsed)
    except (KafkaException, ValueError, TypeError) as exc:
        why = _secrets.scrub(str(exc), _secrets.secret_values(settings))
        msg = f"{option} rejected by librdkafka: {why}; fix or remove that setting"
        raise error(msg) from None
    producer.flush(0)
