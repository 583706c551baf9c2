"""A connection that goes silent in the middle of a query, under `workerpool run`.

No iptables here, and the loopback is shared: the children reach PostgreSQL through a small TCP
proxy instead, which can stop forwarding on the connections it holds while it keeps them open
and keeps reading. Nothing then ever answers a query in flight, yet the kernel still
acknowledges every byte and every keepalive, so neither ``tcp_user_timeout`` nor the keepalives
can notice. The worker's loop stays blocked in its read. What must save the job is the
heartbeat: the loop stops ticking, the supervisor kills the child after ``hang_timeout``, and the
replacement releases the dead child's claim so the job runs again.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from sqlalchemy.engine import URL

from tests.helpers.db import job_row
from tests.helpers.waiting import wait_until


@dataclass
class Pair:
    client: socket.socket
    server: socket.socket
    silent: bool = False


@dataclass
class BlackholeProxy:
    """Forwards TCP connections to PostgreSQL until :meth:`silence` (then swallows both ways)."""

    target: tuple[str, int] | str  # (host, port), or a unix socket path
    listener: socket.socket = field(init=False)
    pairs: list[Pair] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def port(self) -> int:
        return self.listener.getsockname()[1]

    def silence(self) -> int:
        """Every connection open now stops forwarding (new ones still work); returns how many."""
        with self.lock:
            for pair in self.pairs:
                pair.silent = True
            return len(self.pairs)

    def close(self) -> None:
        self.listener.close()
        with self.lock:
            for pair in self.pairs:
                pair.client.close()
                pair.server.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            server = self._connect()
            pair = Pair(client, server)
            with self.lock:
                self.pairs.append(pair)
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(pair, src, dst), daemon=True).start()

    def _connect(self) -> socket.socket:
        if isinstance(self.target, str):
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(self.target)
            return server
        return socket.create_connection(self.target)

    @staticmethod
    def _pump(pair: Pair, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if not pair.silent:  # silent: read and drop, so the peer's kernel still ACKs
                    dst.sendall(data)
        except OSError:
            pass
        if not pair.silent:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass


def _target(db_url: URL) -> tuple[str, int] | str:
    socket_dir = str(db_url.query.get("host", ""))
    if db_url.host is None and socket_dir.startswith("/"):  # the embedded server: a unix socket
        return f"{socket_dir}/.s.PGSQL.{db_url.port or 5432}"
    return (db_url.host or "127.0.0.1", db_url.port or 5432)


@pytest.fixture
def proxy(db_url: URL) -> Iterator[BlackholeProxy]:
    running = BlackholeProxy(_target(db_url))
    yield running
    running.close()


def test_a_connection_silent_mid_query_costs_a_child_never_the_job(
        start, app, sql, db_url, proxy):
    through_proxy = URL.create("postgresql+psycopg", username=db_url.username,
                               password=db_url.password, host="127.0.0.1", port=proxy.port,
                               database=db_url.database)
    sup = start(env={"WORKERPOOL_DATABASE_URL":
                     through_proxy.render_as_string(hide_password=False)})
    sup.wait_running("slow")
    victim = sup.child_pid("slow")
    job = app.enqueue("steps", {"n": 20, "step": 0.1})  # enqueued directly, not through it
    wait_until(lambda: (job_row(sql, job)["checkpoint"] or {}).get("done", 0) >= 2, 15,
               message="job running through the proxy")

    assert proxy.silence() >= 2  # at least the slow child's loop and its listener

    wait_until(lambda: sup.events("hang_detected", worker="slow", pid=str(victim)), 20,
               message=f"the silenced slow child detected as hung\n{sup.log()[-3000:]}")
    wait_until(lambda: job_row(sql, job)["state"] == "done", 30,
               message=f"job done by a replacement\n{sup.log()[-3000:]}")
    row = job_row(sql, job)
    assert row["attempts"] == 2, row
    assert [e["type"] for e in row["errors"]] == ["WorkerLost"], row["errors"]
    assert row["checkpoint"]["resumed_from"] >= 2  # the second attempt resumed, not restarted
    assert sup.events("child_exited", pid=str(victim))[0].fields["status"] == "signal:SIGKILL"
