"""The host side of :class:`connectors.testing.postgres.EmbeddedPostgres`.

Ports, the OS user the server runs as, permissions, and the server's processes as /proc
shows them.
"""

from __future__ import annotations

import os
import pwd
import socket
import stat
import subprocess
from pathlib import Path

# Unprivileged OS user the server runs as when the tests run as root.
SERVER_USER = "embedded_postgres"


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port nobody listens on right now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def server_account() -> pwd.struct_passwd | None:
    """Return the account to run the server as: None (the current user) unless root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        subprocess.run(  # noqa: S603 - fixed arguments
            [
                "/usr/sbin/useradd",
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                SERVER_USER,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        return pwd.getpwnam(SERVER_USER)


def allow_traversal(directory: Path) -> None:
    """Add search (x, not read) permission for others on ``directory`` and its ancestors.

    Only when running as root with a base directory below a private one (pytest's
    ``/tmp/pytest-of-root`` is 0700): the server's user must reach its data directory.
    """
    for path in (directory, *directory.parents):
        mode = path.stat().st_mode
        if not mode & stat.S_IXOTH:
            path.chmod(mode | stat.S_IXOTH)


def traversable(directory: Path) -> bool:
    """Return whether others may search ``directory`` and each of its ancestors."""
    return all(p.stat().st_mode & stat.S_IXOTH for p in (directory, *directory.parents))


def check_setting(name: str, value: str) -> None:
    if not name.replace("_", "").replace(".", "").isalnum() or "\n" in value or "\0" in value:
        msg = f"server setting {name}={value!r}: use a setting name and a one-line value"
        raise ValueError(msg)


def _stat_fields(pid: str | int) -> list[str]:
    """Fields of /proc/<pid>/stat after the command name (state first), or [] if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return []


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped counts as dead)."""
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] != "Z"


def children(parent: int) -> list[int]:
    """Pids of the live child processes of ``parent``."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(entry.name)
            if len(fields) > 1 and int(fields[1]) == parent and fields[0] != "Z":
                out.append(int(entry.name))
    return out
