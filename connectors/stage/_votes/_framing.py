"""Length-prefixed JSON messages over a socket (both ends of the vote channel)."""

from __future__ import annotations

import json
import socket
import struct
import time
from typing import Any

# Largest request accepted, in bytes; a vote is well below it since its error text is
# cut to MAX_ERROR_CHARS.
MAX_MESSAGE_BYTES = 16 * 1024
_HEADER = struct.Struct(">I")


class TooLargeError(Exception):
    """A peer announced a message over the size limit."""


def recv_exact(sock: socket.socket, n: int, deadline: float) -> bytes:
    """Read exactly ``n`` bytes before ``deadline`` (monotonic seconds)."""
    chunks: list[bytes] = []
    while n > 0:
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        chunk = sock.recv(min(n, 65536))
        if not chunk:
            msg = "the peer closed the connection mid-message"
            raise ConnectionError(msg)
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv_message(sock: socket.socket, limit: int, timeout_s: float) -> Any:
    """Read one message of at most ``limit`` bytes within ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    (size,) = _HEADER.unpack(recv_exact(sock, _HEADER.size, deadline))
    if size > limit:
        msg = f"message of {size} bytes exceeds the limit of {limit} bytes"
        raise TooLargeError(msg)
    return json.loads(recv_exact(sock, size, deadline).decode("utf-8"))


def send_message(sock: socket.socket, doc: Any) -> None:
    """Send ``doc`` as one message."""
    payload = json.dumps(doc, separators=(",", ":")).encode("utf-8")
    sock.sendall(_HEADER.pack(len(payload)) + payload)


def error_answer(code: str, message: str) -> dict[str, Any]:
    """Return the answer document of a refused or failed vote."""
    return {"ok": False, "code": code, "error": message}
