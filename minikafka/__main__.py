"""``python -m minikafka``: run a broker (one or more nodes) in this process.

The first stdout line is ``LISTENING host:port`` (flushed; with ``--nodes N`` the N nodes'
``host:port`` comma-separated); with ``--control-port`` the second is ``CONTROL host:port``.
Logs go to stderr. SIGTERM or SIGINT stops the broker cleanly. ``--security-protocol`` and
the ``--sasl-*`` / ``--ssl-*`` flags secure every listener (docs/minikafka.md, "Security").

``python -m minikafka control HOST:PORT ACTION ...`` stops, starts or moves nodes of a
running broker through its control port (docs/minikafka.md, "Node faults").
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from ._broker import Broker
from ._config import FSYNC_POLICIES, TOPIC_LOAD_MODES, BrokerConfig
from ._control import control_main, serve_control
from ._errors import BrokerConfigError
from ._faults import Faults
from ._security import (
    MIN_SCRAM_ITERATIONS,
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    ListenerSecurity,
    read_users_file,
)
from ._server import KafkaServer


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    d = BrokerConfig()
    p = argparse.ArgumentParser(prog="python -m minikafka", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument(
        "--port",
        type=_ports,
        default=[0],
        help="the first node's port (0 picks free ports), or one port per node: P0,P1,...",
    )
    p.add_argument("--data-dir", type=Path, default=None, help="persist here (else memory)")
    p.add_argument("--num-partitions", type=int, default=d.num_partitions)
    p.add_argument("--transaction-max-timeout-ms", type=int, default=d.transaction_max_timeout_ms)
    p.add_argument(
        "--transaction-abort-check-interval-ms",
        type=int,
        default=d.transaction_abort_check_interval_ms,
    )
    p.add_argument(
        "--group-initial-rebalance-delay-ms", type=int, default=d.group_initial_rebalance_delay_ms
    )
    p.add_argument("--offsets-retention-ms", type=int, default=d.offsets_retention_ms)
    p.add_argument(
        "--offsets-retention-check-interval-ms",
        type=int,
        default=d.offsets_retention_check_interval_ms,
    )
    p.add_argument("--fsync-policy", choices=FSYNC_POLICIES, default=d.fsync_policy)
    p.add_argument("--no-auto-create-topics", action="store_true")
    p.add_argument(
        "--topic-load-delay-ms",
        type=int,
        default=d.topic_load_delay_ms,
        help="answer Metadata as if topics were not loaded for this long after the start (tests)",
    )
    p.add_argument(
        "--topic-load-mode",
        choices=TOPIC_LOAD_MODES,
        default=d.topic_load_mode,
        help="meanwhile: hide topics, answer them with LEADER_NOT_AVAILABLE, or "
        "answer no topic at all",
    )
    p.add_argument("--log-level", default="INFO")
    _cluster_args(p, d)
    _security_args(p)
    return p.parse_args(argv)


def _ports(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        msg = f"--port takes PORT or PORT,PORT,... (one per node), not {text!r}"
        raise argparse.ArgumentTypeError(msg) from None


def _cluster_args(p: argparse.ArgumentParser, d: BrokerConfig) -> None:
    c = p.add_argument_group("several nodes (see docs/minikafka.md, 'Several nodes')")
    c.add_argument("--nodes", type=int, default=d.nodes, help="nodes, one listener each")
    c.add_argument(
        "--control-port",
        type=int,
        default=None,
        help="serve node faults (python -m minikafka control) on this port (0 picks one)",
    )
    c.add_argument("--default-replication-factor", type=int, default=d.default_replication_factor)
    c.add_argument("--min-insync-replicas", type=int, default=d.min_insync_replicas)
    c.add_argument(
        "--transaction-state-replication-factor",
        type=int,
        default=d.transaction_state_replication_factor,
        help="0: min(3, nodes)",
    )
    c.add_argument(
        "--transaction-state-min-isr",
        type=int,
        default=d.transaction_state_min_isr,
        help="0: min(2, its replication factor)",
    )
    c.add_argument(
        "--node-failure-detection-ms",
        type=int,
        default=d.node_failure_detection_ms,
        help="after a hard stop, how long leaderships stay with the stopped node",
    )
    c.add_argument(
        "--coordinator-load-ms",
        type=int,
        default=d.coordinator_load_ms,
        help="a moved coordinator answers COORDINATOR_LOAD_IN_PROGRESS this long",
    )


def _security_args(p: argparse.ArgumentParser) -> None:
    s = p.add_argument_group("security (one listener; see docs/minikafka.md)")
    s.add_argument("--security-protocol", choices=SECURITY_PROTOCOLS, default="PLAINTEXT")
    s.add_argument(
        "--sasl-mechanisms",
        default=",".join(SASL_MECHANISMS),
        help="comma-separated enabled mechanisms (default: all of them)",
    )
    s.add_argument(
        "--sasl-user",
        action="append",
        default=[],
        metavar="USER=PASSWORD",
        help="a SASL user (repeatable; visible to local users in the process list)",
    )
    s.add_argument(
        "--sasl-users-file",
        type=Path,
        default=None,
        help="file of user=password lines (keeps passwords off the command line)",
    )
    s.add_argument(
        "--scram-iterations",
        type=int,
        default=MIN_SCRAM_ITERATIONS,
        help="PBKDF2 iterations of the stored SCRAM credentials (>= 4096)",
    )
    s.add_argument("--ssl-certfile", default=None, help="PEM certificate chain of the listener")
    s.add_argument("--ssl-keyfile", default=None, help="PEM private key of the listener")
    s.add_argument(
        "--ssl-client-cafile",
        default=None,
        help="PEM CA bundle; clients must present a certificate it signed",
    )


def listener_security(args: argparse.Namespace) -> ListenerSecurity:
    """Build the listener's security from the command line (BrokerConfigError names the bad flag)."""
    users = read_users_file(args.sasl_users_file) if args.sasl_users_file else {}
    for entry in args.sasl_user:
        name, sep, password = entry.partition("=")
        if not sep:
            msg = "--sasl-user takes USER=PASSWORD"
            raise BrokerConfigError(msg)
        users[name] = password
    mechanisms = tuple(m.strip() for m in args.sasl_mechanisms.split(",") if m.strip())
    return ListenerSecurity(
        protocol=args.security_protocol,
        users=users,
        mechanisms=mechanisms,
        certfile=args.ssl_certfile,
        keyfile=args.ssl_keyfile,
        client_cafile=args.ssl_client_cafile,
        scram_iterations=args.scram_iterations,
    )


async def serve(args: argparse.Namespace, security: ListenerSecurity) -> None:
    """Run until SIGTERM/SIGINT."""
    config = BrokerConfig(
        num_partitions=args.num_partitions,
        auto_create_topics=not args.no_auto_create_topics,
        transaction_max_timeout_ms=args.transaction_max_timeout_ms,
        transaction_abort_check_interval_ms=args.transaction_abort_check_interval_ms,
        group_initial_rebalance_delay_ms=args.group_initial_rebalance_delay_ms,
        offsets_retention_ms=args.offsets_retention_ms,
        offsets_retention_check_interval_ms=args.offsets_retention_check_interval_ms,
        fsync_policy=args.fsync_policy,
        topic_load_delay_ms=args.topic_load_delay_ms,
        topic_load_mode=args.topic_load_mode,
        nodes=args.nodes,
        default_replication_factor=args.default_replication_factor,
        min_insync_replicas=args.min_insync_replicas,
        transaction_state_replication_factor=args.transaction_state_replication_factor,
        transaction_state_min_isr=args.transaction_state_min_isr,
        node_failure_detection_ms=args.node_failure_detection_ms,
        coordinator_load_ms=args.coordinator_load_ms,
    )
    server = KafkaServer(Broker(config, args.data_dir), Faults(), args.host, args.port, security)
    await server.start()
    addresses = ",".join(f"{args.host}:{port}" for port in server.ports)
    sys.stdout.write(f"LISTENING {addresses}\n")
    control = None
    if args.control_port is not None:
        control = await serve_control(args.host, args.control_port, server.apply)
        sys.stdout.write(f"CONTROL {args.host}:{control.sockets[0].getsockname()[1]}\n")
    sys.stdout.flush()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    logging.getLogger("minikafka").info("stopping")
    if control is not None:
        control.close()
    await server.stop()


def main(argv: list[str] | None = None) -> None:
    """Entry point: run a broker, or ``control ...`` to send a node operation to one."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["control"]:
        sys.exit(control_main(argv[1:]))
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        security = listener_security(args)
        asyncio.run(serve(args, security))
    except (BrokerConfigError, OSError) as exc:
        sys.exit(f"python -m minikafka: {exc}")


if __name__ == "__main__":
    main()
