"""Where the server's CPU goes during a soak: CPU seconds per second by role, at every sample.

A role is what a backend serves: the client process on the other end of its connection (its
title, as ``setproctitle`` set it: the worker child, the maintenance child, the supervisor; the
bench itself) and its ``application_name``; a server process with no client (autovacuum, the
checkpointer, the WAL writer) is its ``backend_type``. The client processes' own CPU is counted
too, as ``client: <title>``. CPU comes from ``/proc`` (:func:`.capacity.backend_cpu_s`), so the
server must run on this machine and be reached over TCP (a unix socket gives no client port to
find the process by; such backends count under their ``application_name``).

A backend that started and ended between two samples is not seen (a short autovacuum run); one
that started since the last sample counts from zero.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable

import psutil

from .capacity import backend_cpu_s

#: pg_stat_activity of every server process, with the client port of client backends.
ACTIVITY = (
    "SELECT pid, backend_type, coalesce(application_name, ''), coalesce(client_port, -1)"
    " FROM pg_stat_activity WHERE datname = current_database() OR datname IS NULL"
)


def _title(pid: int) -> str:
    try:
        process = psutil.Process(pid)
        name = " ".join(process.cmdline()).strip() or process.name()
    except psutil.Error:
        return "gone"
    if pid == os.getpid():
        return "bench"
    return name.split(" -m ")[-1][:60] if " -m " in name else name[:60]


class RoleCPU:
    """CPU per role between calls of :meth:`sample`."""

    def __init__(self, sql: Callable[[str], list[tuple]]) -> None:
        self.sql = sql
        self.last: dict[tuple[int, str], float] = {}

    def _clients_by_port(self) -> dict[int, int]:
        return {
            conn.laddr.port: conn.pid
            for conn in psutil.net_connections(kind="tcp")
            if conn.pid is not None and conn.laddr
        }

    def _readings(self) -> dict[tuple[int, str], float]:
        """CPU seconds so far of every process that serves or uses the database, by role."""
        ports = self._clients_by_port()
        readings: dict[tuple[int, str], float] = {}
        for pid, backend_type, application, port in self.sql(ACTIVITY):
            if backend_type != "client backend":
                readings[(pid, backend_type)] = backend_cpu_s(pid)
                continue
            client = ports.get(port)
            who = _title(client) if client else "?"
            readings[(pid, f"backend of {who} [{application}]")] = backend_cpu_s(pid)
            if client and client != os.getpid():
                readings[(client, f"client: {who}")] = backend_cpu_s(client)
        return readings

    def sample(self, seconds: float) -> dict[str, float]:
        """CPU seconds per second of each role since the last call (``seconds`` ago)."""
        now = self._readings()
        per_role: dict[str, float] = defaultdict(float)
        for key, cpu in now.items():
            per_role[key[1]] += cpu - self.last.get(key, 0.0)
        first = not self.last
        self.last = now
        if first or seconds <= 0:
            return {}
        return {role: used / seconds for role, used in sorted(per_role.items())}
