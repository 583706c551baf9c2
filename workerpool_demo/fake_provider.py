"""A fake transactional-email provider (think Postmark or SES), with the manners of a real one.

- Slow sometimes: most calls take tens of milliseconds, one in ten takes around a second.
- Fails with a transient ``503`` sometimes: the caller should retry later.
- Rate-limits with ``429`` and a ``Retry-After`` now and then.
- Rejects an invalid address with ``422``: retrying can never help.
- Honours an ``Idempotency-Key``: a repeated request with a key it has already delivered returns
  the first message id and delivers nothing. This is what turns workerpool's at-least-once
  delivery into one email: a worker killed after the provider accepted a message but before the
  job was marked done runs the job again, and the provider recognises the key.

Its state lives in two tables of the application database (so every worker process shares it):
``demo_provider_requests`` logs every call and its status; ``demo_inbox`` holds what was
delivered. The demo's summary reads them to show one delivery per idempotency key.
"""

from __future__ import annotations

import random
import re
import secrets
import time
from dataclasses import dataclass

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Engine,
    Identity,
    Integer,
    MetaData,
    Table,
    Text,
    func,
    insert,
    select,
)

metadata = MetaData()

requests = Table(
    "demo_provider_requests",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("idempotency_key", Text, nullable=False),
    Column("recipient", Text, nullable=False),
    Column("template", Text, nullable=False),
    Column("status", Integer, nullable=False),  # 200 sent, 208 replayed, 422, 429, 503
)

inbox = Table(
    "demo_inbox",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("idempotency_key", Text, nullable=False),  # deliberately not UNIQUE: the demo checks it
    Column("message_id", Text, nullable=False),
    Column("recipient", Text, nullable=False),
    Column("template", Text, nullable=False),
)

ADDRESS = re.compile(r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$")


@dataclass(frozen=True)
class Behaviour:
    """How often the provider misbehaves (probabilities per request) and how slow it is."""

    slow: float = 0.10
    unavailable: float = 0.12
    rate_limited: float = 0.03
    fast_latency: tuple[float, float] = (0.01, 0.06)
    slow_latency: tuple[float, float] = (0.6, 1.2)
    retry_after: float = 1.0


class ProviderError(Exception):
    """An HTTP error answer from the provider."""

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"{status} {message}")
        self.status = status
        self.retry_after = retry_after


class EmailProvider:
    """The client a handler calls. One per process; safe to share between threads."""

    def __init__(self, engine: Engine, behaviour: Behaviour | None = None) -> None:
        self.engine = engine
        self.behaviour = behaviour or Behaviour()
        self._rng = random.Random()

    def send(self, *, idempotency_key: str, to: str, template: str) -> str:
        """Deliver one email; returns the message id. Raises :class:`ProviderError`."""
        status = self._roll()
        time.sleep(self._latency())
        if status == 200 and not ADDRESS.match(to):
            status = 422
        if status != 200:
            self._log(idempotency_key, to, template, status)
            raise self._error(status)
        return self._deliver(idempotency_key, to, template)

    def _roll(self) -> int:
        draw, b = self._rng.random(), self.behaviour
        if draw < b.unavailable:
            return 503
        if draw < b.unavailable + b.rate_limited:
            return 429
        return 200

    def _latency(self) -> float:
        b = self.behaviour
        low, high = b.slow_latency if self._rng.random() < b.slow else b.fast_latency
        return self._rng.uniform(low, high)

    def _error(self, status: int) -> ProviderError:
        if status == 422:
            return ProviderError(422, "Unprocessable Entity: invalid recipient address")
        if status == 429:
            return ProviderError(429, "Too Many Requests", retry_after=self.behaviour.retry_after)
        return ProviderError(503, "Service Unavailable")

    def _deliver(self, key: str, to: str, template: str) -> str:
        """Deliver once per key: a second request with the key replays the first answer."""
        with self.engine.begin() as conn:
            conn.execute(select(func.pg_advisory_xact_lock(func.hashtext(key))))
            earlier = conn.execute(
                select(inbox.c.message_id).where(inbox.c.idempotency_key == key)
            ).scalar()
            status = 208 if earlier else 200
            conn.execute(
                insert(requests).values(
                    idempotency_key=key, recipient=to, template=template, status=status
                )
            )
            if earlier:
                return earlier
            message_id = f"msg_{secrets.token_hex(8)}"
            conn.execute(
                insert(inbox).values(
                    idempotency_key=key, message_id=message_id, recipient=to, template=template
                )
            )
            return message_id

    def _log(self, key: str, to: str, template: str, status: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                insert(requests).values(
                    idempotency_key=key, recipient=to, template=template, status=status
                )
            )
