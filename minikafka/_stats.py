"""Per-API request counter, for benchmarks that count broker round trips.

Contract:
1. the server calls :meth:`RequestCounter.count` once per request it decoded and
   dispatched (whatever the answer: success, Kafka error, injected fault), on the
   broker's loop thread; that is one dict increment;
2. :meth:`RequestCounter.snapshot` may be called from any thread; it copies the dict
   in one C-level operation under the GIL, so it never sees a torn state;
3. the difference of two snapshots is exact; :meth:`RequestCounter.reset` is a
   convenience, and a request racing with it may land on either side.

Requests that never reach dispatch (undecodable frames, unknown keys, unsupported
versions) are counted under ``rejected``, and the read-out itself is not counted.
"""

from __future__ import annotations

import json
import socket
import struct

from ._faults import ApiKey

REJECTED = "rejected"


def api_name(api_key: int) -> str:
    """Kafka's name of an API key (``Produce``, ``EndTxn``), or ``api-<key>``."""
    try:
        member = ApiKey(api_key)
    except ValueError:
        return f"api-{api_key}"
    return "".join(part.capitalize() for part in member.name.split("_"))


class RequestCounter:
    """Counts requests per API key (see the module docstring)."""

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}
        self._rejected = 0

    def count(self, api_key: int) -> None:
        """Count one dispatched request of ``api_key``."""
        counts = self._counts
        counts[api_key] = counts.get(api_key, 0) + 1

    def reject(self) -> None:
        """Count one frame that was refused before dispatch."""
        self._rejected += 1

    def snapshot(self) -> dict[str, int]:
        """Return the counts so far by API name (Kafka's spelling), plus ``rejected`` if any."""
        counts = dict(self._counts)
        out = {api_name(key): n for key, n in sorted(counts.items())}
        if self._rejected:
            out[REJECTED] = self._rejected
        return out

    def reset(self) -> None:
        """Start counting from zero."""
        self._counts = {}
        self._rejected = 0


# ---- read-out over the wire (any process) ----------------------------------------
# A private request key, far outside Kafka's range and never advertised in ApiVersions:
# frame = i16 key, i16 version 0, i32 correlation id, i16 client id length (+ bytes),
# i8 flags (1 = reset after reading). The answer is i32 correlation id, i32 length and
# the snapshot as UTF-8 JSON.
STATS_API_KEY = 32100
STATS_RESET_FLAG = 1
# Seconds to wait for the broker's answer to a request-count read-out.
STATS_TIMEOUT_S = 30.0


def stats_reset_requested(frame: bytes) -> bool:
    """Whether a stats frame asks to reset the counters (False for a malformed frame)."""
    if len(frame) < 10:
        return False
    client_len = int.from_bytes(frame[8:10], "big", signed=True)
    flags_at = 10 + max(client_len, 0)
    return len(frame) > flags_at and bool(frame[flags_at] & STATS_RESET_FLAG)


def encode_stats_response(correlation_id: int, counts: dict[str, int]) -> bytes:
    """Encode the length-prefixed answer to a stats frame."""
    body = json.dumps(counts, sort_keys=True).encode()
    payload = struct.pack(">ii", correlation_id, len(body)) + body
    return struct.pack(">i", len(payload)) + payload


def request_counts(bootstrap_servers: str, *, reset: bool = False) -> dict[str, int]:
    """Read (and optionally reset) the request counts of the minikafka broker at an address.

    ``bootstrap_servers`` is ``host:port`` or a comma-separated list of them (a cluster's
    nodes share one counter: the first that answers is asked). Raises ``OSError`` when no
    address answers, ``ValueError`` on a garbled answer.
    """
    addresses = [a.strip() for a in bootstrap_servers.split(",") if a.strip()]
    for address in addresses[:-1]:
        try:
            return _read_counts(address, reset=reset)
        except OSError:
            continue  # a stopped node: ask the next one
    return _read_counts(addresses[-1], reset=reset)


def _read_counts(address: str, *, reset: bool) -> dict[str, int]:
    host, _, port = address.rpartition(":")
    flags = STATS_RESET_FLAG if reset else 0
    frame = struct.pack(">hhihb", STATS_API_KEY, 0, 1, -1, flags)
    with socket.create_connection((host.strip("[]"), int(port)), STATS_TIMEOUT_S) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", _recv_exact(sock, 4))[0]
        payload = _recv_exact(sock, size)
    correlation_id, length = struct.unpack_from(">ii", payload)
    if correlation_id != 1 or length != len(payload) - 8:
        msg = f"garbled request-count answer from {address}"
        raise ValueError(msg)
    counts = json.loads(payload[8:])
    return {str(k): int(v) for k, v in counts.items()}


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    buf = bytearray()
    while len(buf) < size:
        chunk = sock.recv(size - len(buf))
        if not chunk:
            msg = "broker closed the connection during a request-count read-out"
            raise ConnectionError(msg)
        buf += chunk
    return bytes(buf)
