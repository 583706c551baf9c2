"""The injector: carries out the schedule's faults on the fleet and, if the run owns it, on the
database server; records when each landed (database clock) for the recovery times."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

from .cluster import Cluster
from .fleet import Fleet
from .proxy import BlackholeProxy
from .schedule import Fault

log = logging.getLogger("workerpool.chaos")

TERMINATE = """
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND application_name LIKE 'workerpool%%' AND (pid + %(target)s) %% 2 = 0
"""


MAX_HELD = 500  # connections the exhaust fault opens at most (the cluster allows 100)
ADMIN_PATIENCE = 5.0  # seconds a fault waits for a connection of its own
ASYNC_LAG = 2.0  # seconds of commits an asynchronous failover run loses on purpose
SYNC_PATIENCE = 30.0  # seconds a synchronous failover waits for the standby to be in sync


@dataclass
class Landed:
    """A fault as it happened: what it hit and when (seconds since the epoch, database clock)."""

    fault: Fault
    at: float
    target: str
    error: str | None = None


@dataclass
class Servers:
    """The clusters the run created (none against a user's server)."""

    primary: Cluster | None = None
    standby: Cluster | None = None
    failed_over: bool = False
    asynchronous: bool = False  # the standby is not synchronous: a failover can lose commits


@dataclass
class Injector:
    fleet: Fleet
    admin_kwargs: dict[str, Any]  # psycopg keyword arguments for pg_terminate_backend
    servers: Servers
    drain_wait: float
    clock_offset: float  # database clock minus this machine's clock, seconds
    landed: list[Landed] = field(default_factory=list)
    stopped: dict[int, float] = field(default_factory=dict)  # pid → monotonic time to SIGCONT
    drain_codes: list[tuple[int, int | None]] = field(default_factory=list)
    proxies: list[BlackholeProxy] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)

    def now(self) -> float:
        return time.time() + self.clock_offset

    def inject(self, fault: Fault) -> None:
        at = self.now()
        try:
            target = getattr(self, f"_{fault.kind}")(fault)
            self.landed.append(Landed(fault, at, target))
        except Exception as exc:  # a fault that could not land is reported, not fatal
            log.warning("fault %s failed: %s", fault.describe(), exc)
            self.landed.append(Landed(fault, at, "", f"{type(exc).__name__}: {exc}"))

    def continue_stopped(self, everything: bool = False) -> None:
        now = time.monotonic()
        for pid, when in list(self.stopped.items()):
            if everything or now >= when:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
                del self.stopped[pid]

    def wait_drains(self) -> None:
        for thread in self._threads:
            thread.join()

    def _child(self, fault: Fault) -> int:
        children = self.fleet.children()
        if not children:
            raise RuntimeError("no child process alive")
        return children[fault.target % len(children)]

    def _kill_child(self, fault: Fault) -> str:
        pid = self._child(fault)
        os.kill(pid, signal.SIGKILL)
        return f"pid {pid}"

    def _stop_child(self, fault: Fault) -> str:
        pid = self._child(fault)
        os.kill(pid, signal.SIGSTOP)
        self.stopped[pid] = time.monotonic() + fault.seconds
        return f"pid {pid}"

    def _kill_supervisor(self, fault: Fault) -> str:
        member = self.fleet.pick(fault.target)
        if member is None:
            raise RuntimeError("no supervisor alive")
        self.fleet.kill(member)
        self.fleet.start()
        return f"supervisor {member.pid}"

    def _term_supervisor(self, fault: Fault) -> str:
        member = self.fleet.pick(fault.target)
        if member is None:
            raise RuntimeError("no supervisor alive")
        self.fleet.start()  # a rolling deploy: the new one starts while the old one drains

        def drain() -> None:
            self.drain_codes.append((member.pid, self.fleet.terminate(member, self.drain_wait)))

        thread = threading.Thread(target=drain, daemon=True)
        thread.start()
        self._threads.append(thread)
        return f"supervisor {member.pid}"

    def _terminate_backends(self, fault: Fault) -> str:
        with self._admin() as conn:
            row = conn.execute(TERMINATE, {"target": fault.target % 2}).fetchone()
        return f"{row[0] if row else 0} backends"

    def _admin(self) -> psycopg.Connection:
        """A superuser connection, tried again for up to ADMIN_PATIENCE seconds: a fault
        before may still hold every slot (exhaust_connections) or the server be restarting, as
        an operator's terminate would find them; the fault lands when it can."""
        deadline = time.monotonic() + ADMIN_PATIENCE
        while True:
            try:
                return psycopg.connect(autocommit=True, **self.admin_kwargs)
            except psycopg.OperationalError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)

    def _exhaust_connections(self, fault: Fault) -> str:
        """An outside client takes every connection slot (the superuser's reserved ones too)
        for ``fault.seconds``: new connections fail with "too many clients" meanwhile."""
        server = self._primary()
        held: list[psycopg.Connection] = []
        kwargs = self._one_server_kwargs()
        try:
            while len(held) < MAX_HELD:
                try:
                    held.append(
                        psycopg.connect(
                            host="127.0.0.1",
                            port=server.port,
                            application_name="chaos hog",
                            **kwargs,
                        )
                    )
                except psycopg.OperationalError:
                    break
            release = threading.Timer(fault.seconds, _close_all, (held,))
            release.daemon = True
            release.start()
            self._threads.append(release)
        except BaseException:
            _close_all(held)
            raise
        return f"{len(held)} connections for {fault.seconds:.1f}s"

    def _blackhole(self, fault: Fault) -> str:
        if not self.proxies:
            raise RuntimeError("no proxy in front of a unix-socket server")
        return f"{sum(proxy.silence() for proxy in self.proxies)} connections silenced"

    def _primary(self) -> Cluster:
        current = self.servers.standby if self.servers.failed_over else self.servers.primary
        if current is None:
            raise RuntimeError("server faults need a cluster the run created")
        return current

    def _pg_restart_fast(self, fault: Fault) -> str:
        self._primary().restart("fast")
        return f"port {self._primary().port}"

    def _pg_restart_immediate(self, fault: Fault) -> str:
        self._primary().restart("immediate")
        return f"port {self._primary().port}"

    def _failover(self, fault: Fault) -> str:
        primary, standby = self.servers.primary, self.servers.standby
        if primary is None or standby is None or self.servers.failed_over:
            raise RuntimeError("failover needs the run's primary and its standby")
        caught_up = ""
        if self.servers.asynchronous:
            self._lag_then_crash(primary)
        else:
            caught_up = self._standby_caught_up(primary)
            primary.stop("immediate")  # lost; the synchronous standby has every commit
        standby.promote()
        self.servers.failed_over = True
        return f"port {primary.port} -> {standby.port}{caught_up}"

    def _standby_caught_up(self, primary: Cluster) -> str:
        """Wait until the standby streams and has flushed all the primary's WAL, as an HA
        manager promotes only a standby known to be in sync. PostgreSQL makes a commit visible
        on the primary without the standby when the backend waiting for the standby is
        terminated or cancelled ("the transaction has already committed locally, but might not
        have been replicated"), and after a restart, while the standby reconnects; a failover
        then loses commits that clients saw (a retried enqueue finds its row and is told ok).
        Those are the server's to lose, not workerpool's."""
        deadline = time.monotonic() + SYNC_PATIENCE
        waited = time.monotonic()
        while time.monotonic() < deadline:
            with contextlib.suppress(psycopg.Error):
                if self._in_sync(primary):
                    return f" (standby in sync after {time.monotonic() - waited:.1f} s)"
            time.sleep(0.1)
        return f" (standby NOT in sync after {SYNC_PATIENCE:.0f} s: commits may be lost)"

    def _one_server_kwargs(self) -> dict[str, Any]:
        """The admin connection's arguments, less those naming the servers (multi-host URL)."""
        return {
            k: v
            for k, v in self.admin_kwargs.items()
            if k not in ("host", "port", "target_session_attrs")
        }

    def _in_sync(self, primary: Cluster) -> bool:
        kwargs = self._one_server_kwargs()
        with psycopg.connect(
            autocommit=True, host="127.0.0.1", port=primary.port, **kwargs
        ) as conn:
            row = conn.execute(
                "SELECT bool_or(state = 'streaming' AND flush_lsn >= pg_current_wal_flush_lsn())"
                " FROM pg_stat_replication"
            ).fetchone()
        return bool(row and row[0])

    def _lag_then_crash(self, primary: Cluster) -> None:
        """Stop the primary's WAL sender for a while, then SIGKILL the whole primary: commits
        acknowledged meanwhile never left it, which is what a lagging asynchronous standby
        loses. (Stopping the standby's receiver instead loses nothing: the WAL already sent
        waits in its socket buffer.)"""
        kwargs = self._one_server_kwargs()
        with psycopg.connect(
            autocommit=True, host="127.0.0.1", port=primary.port, **kwargs
        ) as conn:
            senders = [row[0] for row in conn.execute("SELECT pid FROM pg_stat_replication")]
        for pid in senders:
            os.kill(pid, signal.SIGSTOP)
        time.sleep(ASYNC_LAG)
        primary.crash()


def _close_all(held: list[psycopg.Connection]) -> None:
    for conn in held:
        with contextlib.suppress(Exception):
            conn.close()
