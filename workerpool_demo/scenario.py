"""The burst of web requests the demo plays against the example backend."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from types import ModuleType

from sqlalchemy import Connection


@dataclass(frozen=True)
class Request:
    """One web request of the scenario, due ``at`` seconds after the start."""

    at: float
    kind: str  # signup | reset | delete | export | approve
    index: int  # signup, reset: the signup's number; the others: the existing user's number
    email: str = ""
    name: str = ""


@dataclass
class Scenario:
    requests: list[Request]
    existing_users: int
    invalid_emails: set[str]
    poison_email: str


def plan(rng: random.Random, duration: float, users: int, poison_name: str) -> Scenario:
    """A launch-day burst: 40% of signups in the first second, the rest spread over the run.

    1 in 10 signups is double-clicked, 3% have an invalid address, one is the poison message;
    a quarter of new users ask for a password reset; some long-time users delete their account
    and a few others ask for an export of their data, which support approves a little before or
    after the export's job starts waiting for the approval.
    """
    spread = max(duration * 0.7, 1.0)
    requests: list[Request] = []
    invalid: set[str] = set()
    poison_at = rng.randrange(users // 4, users // 2)
    for n in range(users):
        at = rng.uniform(0, 1.0) if rng.random() < 0.4 else rng.uniform(0, spread)
        email, name = f"user{n}@example.com", f"User {n}"
        if n == poison_at:
            email, name = f"user{n}@example.com", poison_name
        elif rng.random() < 0.03 or n == 1:
            email = rng.choice([f"user{n}@", f"user{n}.example.com", f"user {n}@example.com"])
            invalid.add(email)
        requests.append(Request(at, "signup", n, email, name))
        if rng.random() < 0.1:  # a double click: the same request again
            requests.append(Request(at + rng.uniform(0.05, 0.8), "signup", n, email, name))
        if email not in invalid and n != poison_at and rng.random() < 0.25:
            requests.append(Request(at + rng.uniform(0.5, 3.0), "reset", n))
    existing = max(5, users // 10)
    deleted = rng.sample(range(existing), k=max(3, existing * 2 // 3))
    for k in deleted:
        requests.append(Request(rng.uniform(0, spread), "delete", k))
    for k in [k for k in range(existing) if k not in deleted][: max(2, existing // 5)]:
        at = rng.uniform(0, spread)
        requests.append(Request(at, "export", k))
        requests.append(Request(at + rng.uniform(0.1, 3.0), "approve", k))
    requests.sort(key=lambda r: r.at)
    poison_email = f"user{poison_at}@example.com"
    return Scenario(requests, existing, invalid, poison_email)


class Backend:
    """Plays the scenario's requests through the example app's web-backend functions."""

    def __init__(self, app: ModuleType, scenario: Scenario, existing_ids: list[int]) -> None:
        self.app = app
        self.pending = list(scenario.requests)
        self.existing_ids = existing_ids
        self.signups: dict[int, int] = {}  # signup number -> user id
        self.counts: Counter[str] = Counter()

    def play_due(self, elapsed: float) -> None:
        due = [r for r in self.pending if r.at <= elapsed]
        if not due:
            return
        self.pending = self.pending[len(due) :]
        with self.app.pool.engine.begin() as conn:
            for request in due:
                self._play(conn, request)

    def _play(self, conn: Connection, request: Request) -> None:
        self.counts[request.kind] += 1
        if request.kind == "signup":
            self.signups[request.index] = self.app.signup(conn, request.email, request.name)
        elif request.kind == "reset":
            self.app.request_password_reset(conn, self.signups[request.index])
        elif request.kind == "delete":
            self.app.request_deletion(conn, self.existing_ids[request.index])
        elif request.kind == "export":
            self.app.request_export(conn, self.existing_ids[request.index])
        elif request.kind == "approve":
            self.app.approve_export(conn, self.existing_ids[request.index], by="support")

    @property
    def done(self) -> bool:
        return not self.pending
