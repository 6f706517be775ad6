"""``python -m minikafka``: run a broker in this process.

The first stdout line is ``LISTENING host:port`` (flushed); logs go to stderr.
SIGTERM or SIGINT stops the broker cleanly.
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
from ._faults import Faults
from ._server import KafkaServer


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    d = BrokerConfig()
    p = argparse.ArgumentParser(prog="python -m minikafka", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
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
    return p.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
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
    )
    server = KafkaServer(Broker(config, args.data_dir), Faults(), args.host, args.port)
    await server.start()
    sys.stdout.write(f"LISTENING {args.host}:{server.port}\n")
    sys.stdout.flush()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    logging.getLogger("minikafka").info("stopping")
    await server.stop()


def main(argv: list[str] | None = None) -> None:
    """Entry point."""
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
