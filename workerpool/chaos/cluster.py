"""Throwaway PostgreSQL clusters the chaos run owns: initdb + pg_ctl on free ports.

Only a cluster made here is ever stopped, restarted or failed over: against a server the user
names, the run injects process and connection faults only. A cluster lives in a temporary
directory, listens on 127.0.0.1 and a unix socket in that directory, trusts local logins, and is
removed (stopped, files deleted) at the end. As root, PostgreSQL's tools run as the ``postgres``
system user (initdb refuses root).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import URL

from ..process.oslayer import child_pids

log = logging.getLogger("workerpool.chaos")

BIN_ENV = "WORKERPOOL_CHAOS_PG_BIN"
DEFAULT_BIN = "/usr/lib/postgresql/15/bin"
STANDBY_NAME = "chaos_standby"
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "max_connections": "100",
    "shared_buffers": "32MB",
    "fsync": "off",  # a process crash (immediate stop) keeps the OS cache; only power loss needs it
    "full_page_writes": "off",
    "wal_level": "replica",
    "max_wal_senders": "5",
    "hot_standby": "on",
    "wal_keep_size": "256MB",
    "log_min_messages": "warning",
    "logging_collector": "off",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def pg_bin() -> Path:
    found = Path(os.environ.get(BIN_ENV, DEFAULT_BIN))
    if not (found / "initdb").exists():
        raise FileNotFoundError(f"no initdb in {found} (set ${BIN_ENV})")
    return found


@dataclass
class Cluster:
    """One PostgreSQL cluster (primary or standby) under ``root``."""

    root: Path
    name: str
    port: int = field(default_factory=free_port)

    @property
    def data(self) -> Path:
        return self.root / self.name

    @property
    def logfile(self) -> Path:
        return self.root / f"{self.name}.log"

    def url(self, database: str = "postgres") -> URL:
        return URL.create(
            "postgresql+psycopg",
            username="postgres",
            host="127.0.0.1",
            port=self.port,
            database=database,
        )

    def initdb(self, extra: dict[str, str] | None = None) -> None:
        _run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-instructions",
        )
        self.configure({**SETTINGS, **(extra or {})})

    def configure(self, settings: dict[str, str]) -> None:
        lines = [f"{key} = {value}" for key, value in settings.items()]
        lines += [f"port = {self.port}", f"unix_socket_directories = '{self.root}'"]
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\n".join(lines) + "\n")
        with (self.data / "pg_hba.conf").open("a") as hba:
            hba.write("host replication all 127.0.0.1/32 trust\n")

    def start(self) -> None:
        _run("pg_ctl", "-D", str(self.data), "-l", str(self.logfile), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        _run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, mode: str) -> None:
        """``fast``: clean shutdown; ``immediate``: no shutdown checkpoint, crash recovery."""
        self.stop(mode)
        self.start()

    def crash(self) -> None:
        """SIGKILL the postmaster and every process it started: the server is simply gone."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        doomed = [postmaster, *child_pids(postmaster)]
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def promote(self) -> None:
        _run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "promote")

    def running(self) -> bool:
        done = _run("pg_ctl", "-D", str(self.data), "status", check=False)
        return done.returncode == 0

    def base_backup_into(self, standby: Cluster) -> None:
        """Make ``standby`` a streaming replica of this cluster (synchronous once named)."""
        _run(
            "pg_basebackup",
            "-D",
            str(standby.data),
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            "postgres",
            "-X",
            "stream",
            "--no-sync",
            "-R",
            "--checkpoint=fast",
        )  # a spread checkpoint would take minutes of an idle server
        conninfo = f"host=127.0.0.1 port={self.port} user=postgres application_name={STANDBY_NAME}"
        with (standby.data / "postgresql.auto.conf").open("a") as conf:
            # once promoted it is alone: it must not wait for a synchronous standby of its own
            conf.write(
                f"primary_conninfo = '{conninfo}'\nport = {standby.port}\n"
                "synchronous_standby_names = ''\n"
            )


@contextlib.contextmanager
def workspace() -> Iterator[Path]:
    """A directory PostgreSQL's user may write, removed afterwards with what it holds."""
    root = Path(tempfile.mkdtemp(prefix="workerpool-chaos-"))
    os.chmod(root, 0o755)
    owner = _pg_user()
    if owner is not None:
        os.chown(root, owner.pw_uid, owner.pw_gid)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def stop_quietly(cluster: Cluster) -> None:
    with contextlib.suppress(Exception):
        if cluster.data.exists() and cluster.running():
            cluster.stop("immediate")


def _pg_user() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    return pwd.getpwnam("postgres")


def _run(tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    command = [str(pg_bin() / tool), *args]
    owner = _pg_user()
    if owner is not None:
        command = ["runuser", "-u", owner.pw_name, "--", *command]
    started = time.monotonic()
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd="/"
    )
    log.debug("%s took %.2fs", tool, time.monotonic() - started)
    if check and done.returncode != 0:
        raise RuntimeError(
            f"{tool} failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-500:]}"
        )
    return done
