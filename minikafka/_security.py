"""Listener security settings (:class:`ListenerSecurity`), validated at construction.

One broker has one listener, with one of Kafka's four security protocols:

* ``PLAINTEXT``: no TLS, no authentication (the default);
* ``SSL``: TLS (Python's ``ssl``), optionally requiring client certificates;
* ``SASL_PLAINTEXT``: SASL authentication (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) over TCP;
* ``SASL_SSL``: SASL authentication over TLS.

Passwords are given in clear (``users``) and turned into salted credentials when the
broker starts (:mod:`minikafka._sasl`); the broker keeps no password. The repr of a
:class:`ListenerSecurity` shows user names only. See docs/minikafka.md, "Security".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ._errors import BrokerConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# Kafka refuses SCRAM credentials with fewer iterations (and so does RFC 7677's advice).
MIN_SCRAM_ITERATIONS = 4096


@dataclass(frozen=True, slots=True, kw_only=True)
class ListenerSecurity:
    """Security of a broker's listener.

    Attributes:
        protocol: one of ``SECURITY_PROTOCOLS`` (Kafka's ``security.protocol`` names).
        users: user name -> password; required (non-empty) for the SASL protocols.
        mechanisms: the SASL mechanisms the listener enables (Kafka's
            ``sasl.enabled.mechanisms``), a subset of ``SASL_MECHANISMS``.
        certfile / keyfile: PEM certificate chain and private key of the TLS listener;
            required for ``SSL`` and ``SASL_SSL``.
        client_cafile: PEM CA bundle; when set, a TLS client must present a certificate
            signed by it (Kafka's ``ssl.client.auth=required``).
        scram_iterations: PBKDF2 iterations of the stored SCRAM credentials (>= 4096).

    """

    protocol: str = "PLAINTEXT"
    users: Mapping[str, str] = field(default_factory=dict)
    mechanisms: tuple[str, ...] = SASL_MECHANISMS
    certfile: str | None = None
    keyfile: str | None = None
    client_cafile: str | None = None
    scram_iterations: int = MIN_SCRAM_ITERATIONS

    def __post_init__(self) -> None:
        if self.protocol not in SECURITY_PROTOCOLS:
            msg = (
                f"ListenerSecurity.protocol must be one of {SECURITY_PROTOCOLS}, "
                f"got {self.protocol!r}"
            )
            raise BrokerConfigError(msg)
        object.__setattr__(self, "users", dict(self.users))
        object.__setattr__(self, "mechanisms", tuple(self.mechanisms))
        self._check_users()
        self._check_mechanisms()
        self._check_tls()
        if isinstance(self.scram_iterations, bool) or not isinstance(self.scram_iterations, int):
            msg = f"ListenerSecurity.scram_iterations must be an int, got {self.scram_iterations!r}"
            raise BrokerConfigError(msg)
        if self.scram_iterations < MIN_SCRAM_ITERATIONS:
            msg = f"ListenerSecurity.scram_iterations must be >= {MIN_SCRAM_ITERATIONS}"
            raise BrokerConfigError(msg)

    def _check_users(self) -> None:
        for name, password in self.users.items():
            if not isinstance(name, str) or not name:
                msg = f"ListenerSecurity.users: user names must be non-empty strings, got {name!r}"
                raise BrokerConfigError(msg)
            if not isinstance(password, str) or not password:
                msg = f"ListenerSecurity.users: the password of {name!r} must be a non-empty string"
                raise BrokerConfigError(msg)
        if self.uses_sasl and not self.users:
            msg = f"ListenerSecurity.users must name at least one user for {self.protocol}"
            raise BrokerConfigError(msg)
        if self.users and not self.uses_sasl:
            msg = f"ListenerSecurity.users need SASL_PLAINTEXT or SASL_SSL, not {self.protocol}"
            raise BrokerConfigError(msg)

    def _check_mechanisms(self) -> None:
        unknown = [m for m in self.mechanisms if m not in SASL_MECHANISMS]
        if unknown:
            msg = f"ListenerSecurity.mechanisms: {unknown} not among {SASL_MECHANISMS}"
            raise BrokerConfigError(msg)
        if self.uses_sasl and not self.mechanisms:
            msg = f"ListenerSecurity.mechanisms must enable at least one mechanism for {self.protocol}"
            raise BrokerConfigError(msg)

    def _check_tls(self) -> None:
        if self.uses_tls and (self.certfile is None or self.keyfile is None):
            msg = f"ListenerSecurity.certfile and keyfile are required for {self.protocol}"
            raise BrokerConfigError(msg)
        if not self.uses_tls and (self.certfile or self.keyfile or self.client_cafile):
            msg = f"ListenerSecurity: certfile/keyfile/client_cafile need SSL or SASL_SSL, not {self.protocol}"
            raise BrokerConfigError(msg)
        for name in ("certfile", "keyfile", "client_cafile"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                msg = f"ListenerSecurity.{name}: no such file {path!r}"
                raise BrokerConfigError(msg)

    @property
    def uses_sasl(self) -> bool:
        """Whether clients must authenticate with SASL."""
        return self.protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        """Whether the listener speaks TLS."""
        return self.protocol.endswith("SSL")

    def __repr__(self) -> str:
        return (
            f"ListenerSecurity(protocol={self.protocol!r}, users=[{', '.join(map(repr, self.users))}]"
            f" (passwords hidden), mechanisms={self.mechanisms!r}, certfile={self.certfile!r},"
            f" keyfile={self.keyfile!r}, client_cafile={self.client_cafile!r},"
            f" scram_iterations={self.scram_iterations})"
        )

    __str__ = __repr__


def read_users_file(path: str | Path) -> dict[str, str]:
    """Read ``user=password`` lines (``#`` comments and blank lines skipped) into a dict.

    The format of ``python -m minikafka --sasl-users-file`` (passwords stay off the
    command line, where any local user could read them).
    """
    users: dict[str, str] = {}
    for number, raw in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, password = line.partition("=")
        if not sep:
            msg = f"{path}:{number}: expected user=password (the line has no '=')"
            raise BrokerConfigError(msg)
        users[name.strip()] = password
    return users


def write_users_file(path: str | Path, users: Mapping[str, str]) -> None:
    """Write ``users`` in the format :func:`read_users_file` reads, readable by the owner only."""
    for name, password in users.items():
        if "=" in name or "\n" in name or "\n" in password:
            msg = f"user {name!r} cannot be written to a users file ('=' in the name or a newline)"
            raise BrokerConfigError(msg)
    target = Path(path)
    target.touch(mode=0o600)
    target.write_text("".join(f"{n}={p}\n" for n, p in users.items()), encoding="utf-8")
