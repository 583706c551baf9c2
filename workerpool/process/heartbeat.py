"""Heartbeat files: ``<heartbeat_dir>/<worker>.heartbeat``, one per child plus the supervisor's.

The supervisor touches a child's file (wall-clock mtime) when that child reports progress over its
pipe, so a file goes stale exactly when its child is dead, hung, or cut off from the database. A
probe only compares ``time.time()`` with the mtime (:mod:`workerpool.process.healthcheck`).

Standard library only: the probe imports this module and must stay cheap.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

SUFFIX = ".heartbeat"
SUPERVISOR = "supervisor"
#: The maintenance child's name. '@' cannot start a queue name, so it never collides with one
#: (DESIGN's own example declares a queue called "maintenance").
MAINTENANCE = "@maintenance"
#: Worker names the supervisor uses itself; a queue may not take them.
RESERVED_NAMES = (SUPERVISOR,)
#: A file is touched at most this often (seconds).
HEARTBEAT_PERIOD = 1.0
#: `workerpool healthcheck` default: older than this is stale (seconds). Keep it above the
#: largest hang_timeout so that the supervisor replaces a hung child before the probe fires.
DEFAULT_MAX_AGE = 90.0


class HeartbeatDirError(Exception):
    """The heartbeat directory cannot be used safely."""


def default_dir() -> Path:
    """A per-user directory on tmpfs when there is one (``$WORKERPOOL_HEARTBEAT_DIR`` replaces
    it: :func:`workerpool.process.settings.heartbeat_directory`)."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"
    return Path(base) / f"workerpool-{os.getuid()}"


def path_for(directory: Path, worker: str) -> Path:
    return directory / f"{worker}{SUFFIX}"


def touch(path: Path, now: float | None = None) -> None:
    """Create ``path`` if needed and set its mtime to the wall clock (or ``now``)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.utime(fd, None if now is None else (now, now))
    finally:
        os.close(fd)


def age(path: Path, now: float | None = None) -> float:
    """Seconds since ``path`` was touched (never negative). Raises FileNotFoundError."""
    mtime = os.stat(path).st_mtime
    return max(0.0, (time.time() if now is None else now) - mtime)


def list_workers(directory: Path) -> list[str]:
    """Names of the heartbeat files in ``directory``, sorted."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(n[: -len(SUFFIX)] for n in names if n.endswith(SUFFIX) and len(n) > len(SUFFIX))


def prepare_dir(directory: Path) -> None:
    """Create ``directory`` (mode 0700) or check an existing one; raise HeartbeatDirError.

    Refused: a symlink, not a directory, group- or world-writable (anyone else could forge or
    delete our files), or not writable by this process (checked by writing a file).
    """
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        info = os.lstat(directory)
    except OSError as exc:
        raise HeartbeatDirError(
            f"heartbeat dir {directory}: cannot create it ({exc.strerror})"
        ) from None
    if stat.S_ISLNK(info.st_mode):
        raise HeartbeatDirError(f"heartbeat dir {directory} is a symlink; give the real path")
    if not stat.S_ISDIR(info.st_mode):
        raise HeartbeatDirError(f"heartbeat dir {directory} is not a directory")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise HeartbeatDirError(
            f"heartbeat dir {directory} is group- or world-writable "
            f"(mode {stat.S_IMODE(info.st_mode):04o}); chmod 0700 it"
        )
    probe = path_for(directory, SUPERVISOR)
    try:
        touch(probe)
    except OSError as exc:
        raise HeartbeatDirError(
            f"heartbeat dir {directory} is not writable ({exc.strerror})"
        ) from None


def remove_all(directory: Path) -> list[str]:
    """Delete the child heartbeat files an earlier supervisor left (dead processes)."""
    removed = []
    for worker in list_workers(directory):
        if worker == SUPERVISOR:
            continue  # ours: touched again at once
        try:
            os.unlink(path_for(directory, worker))
            removed.append(worker)
        except FileNotFoundError:
            pass
    return removed
