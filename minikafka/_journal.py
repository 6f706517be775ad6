"""Append-only metadata journal: topics, transaction state and group offsets.

Each entry is ``[length u32][crc32c u32][JSON payload]``. Replay stops at the
first torn or corrupt entry and truncates the file there (an entry is only
acknowledged to a client after it was written, so a torn tail was never acked).
At start-up the broker rewrites the journal as a compact snapshot of its state
(write to a temp file, fsync, rename), so it does not grow without bound across
restarts.
"""

from __future__ import annotations

import json
import logging
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import crc32c

log = logging.getLogger("minikafka.journal")
_FRAME = struct.Struct(">II")

Entry = dict[str, Any]


class Journal:
    """Durable list of JSON entries (no-op when ``path`` is None)."""

    def __init__(self, path: Path | None, fsync: bool) -> None:
        self.path = path
        self._fsync = fsync
        self._file: BinaryIO | None = None

    def replay(self) -> Iterator[Entry]:
        """Yield every intact entry in order; truncate a torn tail."""
        if self.path is None or not self.path.exists():
            return
        data = self.path.read_bytes()
        pos = 0
        while pos + _FRAME.size <= len(data):
            length, crc = _FRAME.unpack_from(data, pos)
            body = data[pos + _FRAME.size : pos + _FRAME.size + length]
            if len(body) < length or crc32c.crc32c(body) != crc:
                break
            try:
                entry = json.loads(body)
            except ValueError:
                break
            yield entry
            pos += _FRAME.size + length
        if pos < len(data):
            log.warning("journal %s: dropping %d bytes of torn tail", self.path, len(data) - pos)
            with open(self.path, "r+b") as fh:
                fh.truncate(pos)

    def rewrite(self, entries: list[Entry]) -> None:
        """Atomically replace the journal with ``entries`` and open it for appends."""
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            fh.write(b"".join(_encode(e) for e in entries))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 - kept open

    def append(self, entry: Entry) -> None:
        """Write one entry to the OS (and fsync it when the policy says so)."""
        if self._file is None:
            return
        self._file.write(_encode(entry))
        if self._fsync:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()
            self._file = None


def _encode(entry: Entry) -> bytes:
    body = json.dumps(entry, separators=(",", ":")).encode()
    return _FRAME.pack(len(body), crc32c.crc32c(body)) + body
