"""An application of typed tasks: handlers that take typed parameters after the ``Job``.

Its types live at module level, where a handler's annotations resolve. ``build(url)`` is the
current version; ``build_v1(url)`` an older deploy of ``send_welcome`` (another signature), to
write payloads that no longer fit.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Any, TypedDict
from uuid import UUID

import pydantic

from workerpool import Job, WorkerPool

SHORT = {"drain_timeout": 1.0, "hang_timeout": 5.0, "poll_interval": 0.05}


class Plan(enum.Enum):
    FREE = "free"
    PRO = "pro"


@dataclass
class Address:
    city: str
    zip: str | None = None


@dataclass
class Welcome:
    email: str
    user_id: int
    plan: Plan = Plan.FREE
    addresses: list[Address] = field(default_factory=list)


@dataclass
class Receipt:
    to: str
    sent_at: datetime
    template: str


class Invoice(pydantic.BaseModel):
    number: int
    total: Decimal
    lines: list[str]


class Totals(TypedDict):
    count: int
    amount: str


def build(url: object = None) -> WorkerPool:
    pool = WorkerPool(url)
    pool.queue("typed", concurrency=2, **SHORT)

    @pool.task(queue="typed", max_attempts=3)
    def send_welcome(job: Job, welcome: Welcome, template: str = "welcome") -> Receipt:
        return Receipt(welcome.email, datetime.fromisoformat("2026-01-02T03:04:05+00:00"), template)

    @pool.task(queue="typed", max_attempts=3)
    def bill(job: Job, invoice: Invoice, due: date, account: UUID | None = None) -> Totals:
        assert isinstance(invoice, Invoice) and isinstance(due, date)
        return {"count": len(invoice.lines), "amount": str(invoice.total)}

    @pool.task(queue="typed")
    async def double(job: Job, numbers: list[int], factor: Decimal = Decimal(2)) -> list[Decimal]:
        await asyncio.sleep(0)
        return [n * factor for n in numbers]

    @pool.task(queue="typed", version=2, upcasters={1: _upcast_notify})
    def notify(job: Job, user_id: int, channels: dict[str, bool]) -> dict[str, Any]:
        return {"user_id": user_id, "on": sorted(c for c, on in channels.items() if on)}

    @pool.task(queue="typed")
    def legacy(job: Job) -> dict[str, Any]:
        return {"got": job.payload}

    return pool


def _upcast_notify(payload: dict[str, Any]) -> dict[str, Any]:
    """Version 1 took ``{"user": 7, "email": true}``; version 2 takes ``user_id`` and the
    channels by name."""
    return {"user_id": payload["user"], "channels": {"email": payload.get("email", False)}}


def build_v1(url: object = None) -> WorkerPool:
    """The deploy before: ``send_welcome`` took the address and the user's id alone."""
    pool = WorkerPool(url)
    pool.queue("typed", concurrency=2, **SHORT)

    @pool.task(queue="typed", max_attempts=3)
    def send_welcome(job: Job, email: str, user_id: int) -> None:
        return None

    return pool


pool = build()  # `workerpool run tests.apps.typed:pool` ($WORKERPOOL_DATABASE_URL)
