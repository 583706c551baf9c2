"""The dashboard's overview on a large table: how long one page takes, request to last byte.

Served in-process through Starlette's TestClient, so a figure is routing, every query of the
overview and the template, without a socket. Needs workerpool[web] and httpx2 (the dev extra).
"""

from __future__ import annotations

import time

from workerpool import WorkerPool


def overview_latencies_ms(pool: WorkerPool, requests: int) -> list[float]:
    """``requests`` timed GETs of the overview, after two untimed ones (warm caches)."""
    from starlette.testclient import TestClient

    from workerpool.web import app

    with TestClient(app(pool, token=None), base_url="http://localhost") as http:  # a loopback Host
        for _ in range(2):
            _get(http)
        latencies = []
        for _ in range(requests):
            started = time.perf_counter()
            _get(http)
            latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def _get(http) -> None:
    answer = http.get("/")
    if answer.status_code != 200:
        raise RuntimeError(f"the overview answered {answer.status_code}")
