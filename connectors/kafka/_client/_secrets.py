"""Which Kafka client settings are secret, and the one way the kit hides them.

The single owner of redaction: every repr, log line, metric, error message and record of
the kit that could show a client setting goes through here.

1. :func:`is_secret` decides by the setting's name (librdkafka names; a ``kafka.`` prefix,
   as the source's options carry it, is ignored): the names in :data:`SECRET_KEYS`, and
   any name containing one of :data:`SECRET_WORDS` or ending in ``key.pem`` (a private
   key). Certificates, CA files and paths are not secret (a key *file*'s path is not the key).
2. :class:`Settings` holds librdkafka settings as frozen, picklable pairs: pickled it
   carries every value (a Spark task needs the password to connect), but its ``repr`` and
   ``str`` show :data:`REDACTED` in place of each secret value.
3. :func:`remember` keeps the secret values this process has seen (the client factory
   calls it for every client it builds) and :func:`scrub` replaces any of them in a text:
   for messages that quote a library's words (librdkafka's errors and log lines) the kit
   cannot otherwise vouch for.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

REDACTED = "[redacted]"
# Settings whose value is a secret, beyond the words below (librdkafka names, plus
# Java's ``sasl.jaas.config``, which holds a password in Kafka's own properties files).
SECRET_KEYS = frozenset(
    {
        "sasl.password",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.config",
        "sasl.jaas.config",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.key.pem",
        "ssl_key",
        # Schema Registry client settings (connectors.kafka._formats): user:password, token.
        "basic.auth.user.info",
        "bearer.auth.token",
    }
)
# A setting whose name contains one of these words is secret.
SECRET_WORDS = ("password", "secret", "passphrase", "credential")
# Secret values kept per process for :func:`scrub` (bounded: a process sees a few configs).
_MAX_REMEMBERED = 256
_PREFIX = "kafka."

_lock = threading.Lock()
_remembered: dict[str, None] = {}


def is_secret(key: str) -> bool:
    """Return whether the value of setting ``key`` must never be shown."""
    name = key.lower().removeprefix(_PREFIX)
    return (
        name in SECRET_KEYS
        or any(word in name for word in SECRET_WORDS)
        or name.endswith("key.pem")
    )


def redact(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``settings`` with every secret value replaced by :data:`REDACTED`."""
    return {k: (REDACTED if is_secret(k) else v) for k, v in settings.items()}


def secret_values(settings: Mapping[str, Any]) -> list[str]:
    """Return the non-empty secret values of ``settings`` (as strings)."""
    return [str(v) for k, v in settings.items() if is_secret(k) and str(v)]


def remember(settings: Mapping[str, Any]) -> None:
    """Keep the secret values of ``settings`` for :func:`scrub` in this process."""
    values = secret_values(settings)
    if not values:
        return
    with _lock:
        for value in values:
            _remembered[value] = None
        while len(_remembered) > _MAX_REMEMBERED:
            del _remembered[next(iter(_remembered))]


def scrub(text: str, extra: Iterable[str] = ()) -> str:
    """Return ``text`` with every remembered secret value (and ``extra``) redacted."""
    with _lock:
        values = [*_remembered, *extra]
    for value in sorted({v for v in values if v}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


@dataclass(frozen=True)
class Settings:
    """librdkafka settings as sorted ``(name, value)`` string pairs; secrets hidden in repr.

    Frozen and picklable (it crosses to Spark tasks whole); ``repr``/``str`` redact
    secret values (:func:`is_secret`); :meth:`as_dict` returns the real values.
    """

    items: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", tuple(sorted(self.items)))
        remember(dict(self.items))

    @classmethod
    def of(cls, settings: Mapping[str, str] | None) -> Settings:
        """Return the settings of a mapping of strings (None: empty)."""
        return cls(tuple((settings or {}).items()))

    def as_dict(self) -> dict[str, str]:
        """Return the settings with their real values (for the client factory)."""
        return dict(self.items)

    def get(self, key: str, default: str | None = None) -> str | None:
        """Return the value of setting ``key``, or ``default``."""
        return self.as_dict().get(key, default)

    def __repr__(self) -> str:
        return f"Settings({redact(dict(self.items))!r})"

    __str__ = __repr__
