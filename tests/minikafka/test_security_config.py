"""ListenerSecurity validation, the users file, the CLI flags and the TLS context."""

import os
import ssl
import stat

import pytest

from connectors.testing._tls import make_tls_files
from minikafka import BrokerConfigError, ListenerSecurity
from minikafka.__main__ import listener_security, parse_args
from minikafka._security import read_users_file, write_users_file
from minikafka._tls import server_context


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def test_the_default_is_plaintext():
    sec = ListenerSecurity()
    assert sec.protocol == "PLAINTEXT" and not sec.uses_sasl and not sec.uses_tls
    assert server_context(sec) is None


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"protocol": "SASL"}, "protocol"),
        ({"protocol": "SASL_PLAINTEXT"}, "users"),
        ({"protocol": "PLAINTEXT", "users": {"a": "b"}}, "users need SASL"),
        ({"protocol": "SASL_PLAINTEXT", "users": {"a": ""}}, "password of 'a'"),
        ({"protocol": "SASL_PLAINTEXT", "users": {"": "b"}}, "user names"),
        ({"protocol": "SASL_PLAINTEXT", "users": {"a": "b"}, "mechanisms": ("GSSAPI",)}, "GSSAPI"),
        ({"protocol": "SASL_PLAINTEXT", "users": {"a": "b"}, "mechanisms": ()}, "at least one"),
        ({"protocol": "SSL"}, "certfile and keyfile"),
        ({"protocol": "PLAINTEXT", "certfile": __file__}, "need SSL"),
        (
            {"protocol": "SSL", "certfile": "/no/such.pem", "keyfile": "/no/such.key"},
            "no such file",
        ),
        ({"protocol": "SASL_PLAINTEXT", "users": {"a": "b"}, "scram_iterations": 1000}, "4096"),
    ],
)
def test_bad_settings_are_refused_naming_the_setting(kwargs, names):
    with pytest.raises(BrokerConfigError, match=names):
        ListenerSecurity(**kwargs)


def test_the_repr_shows_user_names_but_no_password():
    sec = ListenerSecurity(protocol="SASL_PLAINTEXT", users={"alice": "Sentinel-Pw-1"})
    assert "alice" in repr(sec) and "Sentinel-Pw-1" not in repr(sec)
    assert "Sentinel-Pw-1" not in str(sec)


def test_the_users_are_copied_at_construction():
    users = {"alice": "pw"}
    sec = ListenerSecurity(protocol="SASL_PLAINTEXT", users=users)
    users["mallory"] = "pw"
    assert list(sec.users) == ["alice"]


def test_a_users_file_round_trips_and_only_its_owner_reads_it(tmp_path):
    path = tmp_path / "users.properties"
    write_users_file(path, {"alice": "p=w with spaces", "bob": "x"})
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert read_users_file(path) == {"alice": "p=w with spaces", "bob": "x"}


def test_a_users_file_line_without_equals_names_the_line(tmp_path):
    path = tmp_path / "users"
    path.write_text("# comment\n\nalice=pw\nbob\n")
    with pytest.raises(BrokerConfigError, match=r"users:4: expected user=password"):
        read_users_file(path)


def test_the_cli_flags_build_the_listener_security(tmp_path, tls):
    users = tmp_path / "users"
    users.write_text("alice=from-file\n")
    args = parse_args(
        [
            "--security-protocol", "SASL_SSL",
            "--sasl-mechanisms", "SCRAM-SHA-512, PLAIN",
            "--sasl-users-file", str(users),
            "--sasl-user", "bob=from=flag",
            "--ssl-certfile", tls.cert_file,
            "--ssl-keyfile", tls.key_file,
        ]
    )  # fmt: skip
    sec = listener_security(args)
    assert sec.protocol == "SASL_SSL" and sec.mechanisms == ("SCRAM-SHA-512", "PLAIN")
    assert dict(sec.users) == {"alice": "from-file", "bob": "from=flag"}
    assert (sec.certfile, sec.keyfile) == (tls.cert_file, tls.key_file)


def test_the_cli_default_is_a_plaintext_listener():
    assert listener_security(parse_args([])) == ListenerSecurity()


def test_a_cli_user_without_password_is_refused():
    args = parse_args(["--security-protocol", "SASL_PLAINTEXT", "--sasl-user", "alice"])
    with pytest.raises(BrokerConfigError, match="USER=PASSWORD"):
        listener_security(args)


def test_the_tls_context_requires_tls_1_2_and_client_certificates_only_when_asked(tls):
    sec = ListenerSecurity(protocol="SSL", certfile=tls.cert_file, keyfile=tls.key_file)
    context = server_context(sec)
    assert context is not None
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.verify_mode == ssl.CERT_NONE
    mutual = ListenerSecurity(
        protocol="SSL", certfile=tls.cert_file, keyfile=tls.key_file, client_cafile=tls.ca_file
    )
    assert server_context(mutual).verify_mode == ssl.CERT_REQUIRED


def test_a_key_that_does_not_match_is_a_config_error(tls):
    sec = ListenerSecurity(protocol="SSL", certfile=tls.cert_file, keyfile=tls.client_key_file)
    with pytest.raises(BrokerConfigError, match="cannot load"):
        server_context(sec)
