"""A TCP proxy in front of PostgreSQL that can go silent: the network fault no RST announces.

The workers reach the server through it. :meth:`BlackholeProxy.silence` makes every connection
open at that moment stop forwarding in both directions while the proxy keeps reading (so the
peers' kernels still acknowledge every byte and keepalive): a query in flight is never
answered and no timeout of the client's TCP stack fires. New connections are forwarded as
usual. What must save the work is the supervisor's heartbeat (the loop stops ticking, the child
is killed after ``hang_timeout``) and the lease (its jobs are recovered).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass, field


@dataclass
class Pair:
    client: socket.socket
    server: socket.socket
    silent: bool = False
    closed: int = 0  # directions finished


@dataclass
class BlackholeProxy:
    """Forwards 127.0.0.1:<port> to ``target`` until :meth:`silence`."""

    target: tuple[str, int] | str  # (host, port), or a unix socket path (an embedded server)
    listener: socket.socket = field(init=False)
    pairs: list[Pair] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, daemon=True, name="chaos-proxy").start()

    @property
    def port(self) -> int:
        return self.listener.getsockname()[1]

    def silence(self) -> int:
        """Every connection open now stops forwarding; returns how many."""
        with self.lock:
            self.pairs = [p for p in self.pairs if p.closed < 2]
            for pair in self.pairs:
                pair.silent = True
            return len(self.pairs)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.close()
        with self.lock:
            for pair in self.pairs:
                for sock in (pair.client, pair.server):
                    with contextlib.suppress(OSError):
                        sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            try:
                server = self._connect()
            except OSError:  # the server is down: the client sees its connection closed
                client.close()
                continue
            pair = Pair(client, server)
            with self.lock:
                self.pairs.append(pair)
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(pair, src, dst), daemon=True).start()

    def _connect(self) -> socket.socket:
        if isinstance(self.target, str):
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.settimeout(5)
            server.connect(self.target)
        else:
            server = socket.create_connection(self.target, timeout=5)
        server.settimeout(None)
        return server

    def _pump(self, pair: Pair, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if not pair.silent:  # silent: read and drop, so the peer's kernel still ACKs
                    dst.sendall(data)
        except OSError:
            pass
        if not pair.silent:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
        with self.lock:
            pair.closed += 1
            if pair.closed == 2:
                for sock in (pair.client, pair.server):
                    with contextlib.suppress(OSError):
                        sock.close()
