"""The one owner of redaction (``connectors.kafka._client._secrets``): which settings are secret, and
how their values are hidden from reprs and from a library's words."""

from __future__ import annotations

import pickle

import pytest

from connectors.kafka._client import _secrets
from connectors.kafka._client._secrets import REDACTED, Settings, is_secret, redact, scrub


@pytest.mark.parametrize(
    "key",
    [
        "sasl.password",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.config",
        "sasl.oauthbearer.assertion.private.key.pem",
        "sasl.oauthbearer.assertion.private.key.passphrase",
        "sasl.jaas.config",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.key.pem",
        "kafka.sasl.password",  # the source's option names
        "KAFKA.SSL.KEY.PEM",
        "some.vendor.credential",
    ],
)
def test_secret_settings(key: str) -> None:
    assert is_secret(key)


@pytest.mark.parametrize(
    "key",
    [
        "sasl.username",
        "security.protocol",
        "ssl.certificate.pem",  # a certificate is public; its key is not
        "ssl.certificate.location",
        "ssl.key.location",  # the path of a key file, not the key
        "ssl.ca.location",
        "sasl.kerberos.keytab",
        "client.id",
    ],
)
def test_settings_that_are_not_secret(key: str) -> None:
    assert not is_secret(key)


def test_settings_hide_secret_values_in_repr_and_keep_them_pickled() -> None:
    settings = Settings.of({"sasl.password": "SENTINEL-s1", "client.id": "app"})
    for text in (repr(settings), str(settings), repr([settings]), f"{settings}"):
        assert "SENTINEL" not in text and REDACTED in text and "app" in text
    again = pickle.loads(pickle.dumps(settings))
    assert again == settings and again.as_dict()["sasl.password"] == "SENTINEL-s1"
    assert redact({"ssl.key.pem": "k", "acks": "all"}) == {"ssl.key.pem": REDACTED, "acks": "all"}


def test_scrub_hides_remembered_and_given_secret_values() -> None:
    _secrets.remember({"sasl.password": "SENTINEL-remembered", "client.id": "not-secret"})
    text = "auth failed for SENTINEL-remembered via not-secret and SENTINEL-given"
    clean = scrub(text, ["SENTINEL-given"])
    assert "SENTINEL" not in clean and "not-secret" in clean
