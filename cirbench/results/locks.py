"""One writer per cell: while a cell runs, ``<root>/locks/<run_id>.lock`` names its process.

The lock file is created with ``O_CREAT | O_EXCL``, so of two processes that try at once
exactly one gets it; it holds JSON (``pid``, ``host``, ``since``, a random ``token``) and its
modification time is refreshed every :data:`HEARTBEAT_SECONDS` while held. A lock is
*stale* when its process is gone: on this host, a pid that is not alive; on another host
(a cluster job), a lock not refreshed for :data:`STALE_AFTER_SECONDS`. A stale lock is
taken over (renamed away first, so that two processes taking over the same stale lock
cannot both win). Like the rest of the store this needs a file system with atomic
``O_EXCL`` and ``rename``, as local disks and NFSv3+ have.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

LOCKS = "locks"
HEARTBEAT_SECONDS = 60.0
STALE_AFTER_SECONDS = 600.0
_CREATING_SECONDS = 10.0  # an empty lock file younger than this is being written by its owner


@dataclass(frozen=True)
class LockInfo:
    """Who holds a cell's lock: the lock file, the process id, host and start time."""

    path: Path
    pid: int
    host: str
    since: str
    token: str = ""

    def describe(self) -> str:
        """``pid 123 on host-a since 2026-01-01T00:00:00+00:00``."""
        return f"pid {self.pid} on {self.host} since {self.since}"


def lock_path(root: Path | str, run_id: str) -> Path:
    """The lock file of ``run_id`` under the results folder ``root``."""
    return Path(root) / LOCKS / f"{run_id}.lock"


def read_lock(path: Path) -> LockInfo | None:
    """The holder recorded in a lock file, or None if it is absent, empty or unreadable."""
    try:
        data = json.loads(path.read_text())
        return LockInfo(path, int(data["pid"]), str(data["host"]), str(data["since"]), str(data.get("token", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def is_stale(info: LockInfo | None, path: Path) -> bool:
    """Whether the lock at ``path`` (holder ``info``, None when the file has no readable
    holder) belongs to a process that is gone (see the module docstring)."""
    try:
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return True
    if info is None:
        return age > _CREATING_SECONDS
    if info.host == socket.gethostname():
        return not _pid_alive(info.pid)
    return age > STALE_AFTER_SECONDS


def live_holder(root: Path | str, run_id: str) -> LockInfo | None:
    """The live process holding ``run_id``'s lock, or None when it is free or stale."""
    path = lock_path(root, run_id)
    if not path.exists():
        return None
    info = read_lock(path)
    if is_stale(info, path):
        return None
    return info or LockInfo(path, 0, "?", "(being created)")


def live_locks(root: Path | str) -> dict[str, LockInfo]:
    """Every cell of ``root`` held by a live process: run id -> holder."""
    out = {}
    for path in sorted((Path(root) / LOCKS).glob("*.lock")):
        holder = live_holder(root, path.stem)
        if holder is not None:
            out[path.stem] = holder
    return out


class CellLock:
    """The lock of one cell (see the module docstring): :meth:`acquire`, then :meth:`release`."""

    def __init__(self, root: Path | str, run_id: str) -> None:
        self.path = lock_path(root, run_id)
        self.token = secrets.token_hex(8)
        self._stop: threading.Event | None = None

    def acquire(self) -> LockInfo | None:
        """Take the lock: None when this process holds it now, else the live holder. A
        stale lock is taken over."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(8):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                try:
                    raw = self.path.read_bytes()
                except FileNotFoundError:
                    continue  # released in between: try again
                info = read_lock(self.path)
                if not is_stale(info, self.path):
                    return info or LockInfo(self.path, 0, "?", "(being created)")
                self._take_over(raw)
                continue
            since = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
            with os.fdopen(fd, "w") as handle:
                json.dump({"pid": os.getpid(), "host": socket.gethostname(), "since": since, "token": self.token}, handle)
            self._start_heartbeat()
            return None
        return live_holder(self.path.parent.parent, self.path.stem) or LockInfo(self.path, 0, "?", "(contended)")

    def _take_over(self, stale: bytes) -> None:
        """Remove the stale lock whose content is ``stale``, unless another process replaced it meanwhile."""
        aside = self.path.with_name(f"{self.path.name}.{self.token}.stale")
        try:
            os.replace(self.path, aside)
        except FileNotFoundError:
            return
        try:
            if aside.read_bytes() != stale:  # a live lock taken in between: put it back
                try:
                    os.link(aside, self.path)
                except FileExistsError:
                    pass
        finally:
            aside.unlink(missing_ok=True)

    def _start_heartbeat(self) -> None:
        self._stop = threading.Event()

        def beat(stop: threading.Event = self._stop) -> None:
            while not stop.wait(HEARTBEAT_SECONDS):
                try:
                    os.utime(self.path)
                except OSError:
                    return

        threading.Thread(target=beat, name=f"cirbench-lock-{self.path.stem}", daemon=True).start()

    def release(self) -> None:
        """Give the lock up (only if this process still holds it)."""
        if self._stop is not None:
            self._stop.set()
            self._stop = None
        info = read_lock(self.path)
        if info is not None and info.token == self.token:
            self.path.unlink(missing_ok=True)
