"""Heartbeat files: ``<heartbeat_dir>/<worker>.heartbeat``, one per child plus the supervisor's.

A directory belongs to one supervisor: it holds an exclusive ``flock`` on the directory's
``supervisor.lock`` for as long as it (or a child it forked) lives, and writes who it is
(``supervisor.owner``: pid, app, database) beside it. The default directory is keyed by the app
and the database under a per-user base, so two supervisors on one host never share files, and a
directory whose lock is held is never cleared.

The supervisor touches a child's file (wall-clock mtime) when that child reports progress over its
pipe, so a file goes stale exactly when its child is dead, hung, or cut off from the database. A
probe only compares ``time.time()`` with the mtime (:mod:`workerpool.process.healthcheck`).

Standard library only: the probe imports this module and must stay cheap.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import stat
import time
from dataclasses import dataclass
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
LOCK = "supervisor.lock"
OWNER = "supervisor.owner"
#: Default directories tried for one app and database (a second supervisor of the same app on
#: the same database takes ``<key>.2``, ...).
MAX_SIBLINGS = 32
#: How long a claim retries a held lock: a probe's shared lock is held for microseconds.
CLAIM_PATIENCE = 0.2


class HeartbeatDirError(Exception):
    """The heartbeat directory cannot be used safely."""


class HeartbeatDirBusy(HeartbeatDirError):
    """Another live supervisor holds the heartbeat directory."""


def base_dir(runtime_dir: str | None = None) -> Path:
    """Where the default directories go: ``$XDG_RUNTIME_DIR/workerpool`` when the session has
    one, else a per-user directory on tmpfs when there is one, else under /tmp."""
    if runtime_dir:
        return Path(runtime_dir) / "workerpool"
    base = "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"
    return Path(base) / f"workerpool-{os.getuid()}"


def key(app: str, database: str) -> str:
    """The default directory's name for ``app`` on ``database``: readable, and unique to both."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", app).strip("-.")[:40] or "app"
    digest = hashlib.sha256(f"{app}\n{database}".encode()).hexdigest()[:10]
    return f"{slug}-{digest}"


def default_dirs(base: Path, app: str, database: str) -> list[Path]:
    """The directories a supervisor of ``app`` on ``database`` may take, in order."""
    first = base / key(app, database)
    return [first] + [base / f"{first.name}.{n}" for n in range(2, MAX_SIBLINGS + 1)]


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

    Refused: a symlink, not a directory, group- or world-writable or another user's (anyone
    else could forge or delete our files), or not writable by this process (checked by writing
    a file).
    """
    check_dir(directory)
    probe = path_for(directory, SUPERVISOR)
    try:
        touch(probe)
    except OSError as exc:
        raise HeartbeatDirError(
            f"heartbeat dir {directory} is not writable ({exc.strerror})"
        ) from None


def check_dir(directory: Path) -> None:
    """Create ``directory`` (mode 0700) or check an existing one, writing nothing in it."""
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
    if info.st_uid != os.geteuid():  # its owner could forge or delete what the probe reads
        raise HeartbeatDirError(
            f"heartbeat dir {directory} belongs to uid {info.st_uid}, not to this process's"
            f" uid {os.geteuid()}; give a directory of its own"
        )


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


# -- one supervisor's directory ----------------------------------------------------------------


@dataclass(frozen=True)
class Owner:
    """Who holds a directory, as its ``supervisor.owner`` says."""

    directory: Path
    pid: int | None
    app: str | None
    database: str | None

    def describe(self) -> str:
        return f"{self.app or 'an app'} (pid {self.pid}) in {self.directory}"


class Claim:
    """A supervisor's hold on its directory: the open, flocked ``supervisor.lock``, released
    when the process exits (its children close the descriptor after the fork)."""

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self.fd: int | None = fd

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __del__(self) -> None:
        self.close()


def claim(directory: Path, app: str | None = None, database: str | None = None) -> Claim:
    """Check ``directory`` (:func:`check_dir`), lock it for this process and record the owner;
    HeartbeatDirBusy if another live process holds it. Then check that it is writable."""
    check_dir(directory)
    try:
        fd = os.open(directory / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise HeartbeatDirError(
            f"heartbeat dir {directory} is not writable ({exc.strerror})"
        ) from None
    if not _lock(fd, fcntl.LOCK_EX, CLAIM_PATIENCE):
        os.close(fd)
        holder = read_owner(directory)
        raise HeartbeatDirBusy(
            f"heartbeat dir {directory} is in use by a live supervisor "
            f"({holder.describe()}); give each supervisor its own --heartbeat-dir"
        )
    held = Claim(directory, fd)
    owner = {"pid": os.getpid(), "app": app, "database": database}
    _write_atomically(directory / OWNER, json.dumps(owner))
    prepare_dir(directory)
    return held


def claim_first_free(candidates: list[Path], app: str | None, database: str | None) -> Claim:
    """:func:`claim` the first of ``candidates`` no live supervisor holds: two supervisors that
    chose the same free default directory at once (each saw it free) take siblings, instead of
    the later one stopping on HeartbeatDirBusy."""
    for directory in candidates[:-1]:
        try:
            return claim(directory, app, database)
        except HeartbeatDirBusy:
            continue
    return claim(candidates[-1], app, database)


def held(directory: Path) -> bool:
    """Whether a live process holds ``directory``'s lock (tested with a shared lock, released
    at once)."""
    try:
        fd = os.open(directory / LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return not _lock(fd, fcntl.LOCK_SH, 0.0)
    finally:
        os.close(fd)


def read_owner(directory: Path) -> Owner:
    try:
        data = json.loads((directory / OWNER).read_text())
    except (OSError, ValueError):
        data = {}
    data = data if isinstance(data, dict) else {}
    return Owner(directory, data.get("pid"), data.get("app"), data.get("database"))


def live_owners(base: Path) -> list[Owner]:
    """The directories under ``base`` that a live supervisor holds, sorted by path."""
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    return [
        read_owner(entry)
        for entry in entries
        if entry.is_dir() and not entry.is_symlink() and held(entry)
    ]


def _lock(fd: int, mode: int, patience: float) -> bool:
    deadline = time.monotonic() + patience
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(
        temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
    )
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(temporary, path)
