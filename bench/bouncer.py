"""A PgBouncer in transaction pooling mode in front of the bench server (``--scale --pgbouncer``).

The configuration the PgBouncer tests use too (trust authentication, no protocol-level
prepared statements), with a pool large enough that it never makes a claim wait: the server
connections it opens are the ones the fleet needed at once.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
from sqlalchemy.engine import URL

from .database import libpq

POOL_SIZE = 50  # server connections per (database, user) at most
START_TIMEOUT = 10.0


class BouncerError(RuntimeError):
    """PgBouncer is missing, or did not start."""


def binary() -> str:
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")
    if not found:
        raise BouncerError("--pgbouncer: pgbouncer is not installed (apt-get install pgbouncer)")
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def server_address(url: URL) -> tuple[str, int]:
    """Where PgBouncer reaches the server of ``url``: its TCP host and port, or its unix socket
    directory (``?host=/dir``: the embedded server's)."""
    if url.host:
        return url.host, url.port or 5432
    socket_dir = url.query.get("host")
    if isinstance(socket_dir, str) and socket_dir.startswith("/"):
        return socket_dir, url.port or 5432
    raise BouncerError("PgBouncer needs a server URL with a host or a socket directory")


def through_bouncer(url: URL, port: int) -> URL:
    """``url`` pointed at a bouncer on ``127.0.0.1:port`` (a socket directory it named dropped:
    libpq would prefer it to the host)."""
    return url.difference_update_query(["host"]).set(host="127.0.0.1", port=port)


def run_as(server: tuple[str, int]) -> list[str]:
    """pgbouncer's ``-u`` under root (it refuses to run as root): ``postgres``, or for a unix
    socket the owner of its directory (the embedded server keeps it private to its own user)."""
    if os.geteuid() != 0:
        return []
    user = Path(server[0]).owner() if server[0].startswith("/") else "postgres"
    return ["-u", pwd.getpwnam(user).pw_name]


def write_config(
    directory: Path,
    port: int,
    server: tuple[str, int],
    *,
    newer: bool,
    pool_size: int = POOL_SIZE,
    max_clients: int = 2000,
    user: str = "postgres",
) -> Path:
    """``pgbouncer.ini`` (and its userlist) in ``directory``: transaction pooling on
    ``127.0.0.1:port`` in front of ``server`` (host, port), trust authentication.
    ``tests/processes/test_pgbouncer.py`` starts its bouncers from the same file."""
    (directory / "userlist.txt").write_text(f'"{user}" ""\n')
    config = directory / "pgbouncer.ini"
    config.write_text(f"""\
[databases]
* = host={server[0]} port={server[1]}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = {max_clients}
auth_type = trust
auth_file = {directory / "userlist.txt"}
ignore_startup_parameters = extra_float_digits,options
{"max_prepared_statements = 0" if newer else ""}
""")
    for path in (directory, *directory.iterdir()):  # pgbouncer runs as postgres when we are root
        path.chmod(0o755 if path.is_dir() else 0o644)
    return config


def newer(path: str) -> bool:
    """1.21+ tracks prepared statements itself: keep 1.18's behaviour (the tested one)."""
    first = subprocess.run(
        [path, "--version"], capture_output=True, text=True, timeout=10
    ).stdout.split()
    return tuple(int(part) for part in first[1].split(".")[:2]) >= (1, 21)


@contextlib.contextmanager
def running(bench_url: URL) -> Iterator[URL]:
    """A fresh PgBouncer for ``bench_url``'s server; yields the URL of the bench database
    through it. Stopped (and its server connections closed) afterwards."""
    server = server_address(bench_url)
    path = binary()
    directory = Path(tempfile.mkdtemp(prefix="wp-bench-bouncer-"))
    port = free_port()
    config = write_config(
        directory, port, server, newer=newer(path), user=bench_url.username or "postgres"
    )
    as_user = run_as(server)
    log_path = directory / "pgbouncer.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            [path, *as_user, str(config)],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,
        )
    through = through_bouncer(bench_url, port)
    try:
        _wait_accepting(proc, through, log_path)
        yield through
    finally:
        stop(proc, 10)
        shutil.rmtree(directory, ignore_errors=True)


def stop(proc: subprocess.Popen, grace: float) -> None:
    """Stop a helper server (PgBouncer, Prometheus): SIGTERM, then SIGKILL after ``grace``."""
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait_accepting(proc: subprocess.Popen, url: URL, log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-1:]
            raise BouncerError(f"pgbouncer exited with {proc.returncode}: {' '.join(tail)}")
        with contextlib.suppress(psycopg.OperationalError):
            with psycopg.connect(libpq(url), connect_timeout=2) as conn:
                conn.execute("SELECT 1")
                return
        if time.monotonic() > deadline:
            raise BouncerError(f"pgbouncer did not accept connections within {START_TIMEOUT}s")
        time.sleep(0.1)
