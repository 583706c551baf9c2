"""What a cancel selects and what it reports: the jobs it names, and per job what happened.

A ``pending`` or ``failed`` job is cancelled at once; a ``processing`` one is asked to stop (its
owner ends it ``cancelled`` once the handler returns, raises, or ignores the request past its
queue's ``cancel_grace``); a finished one is left as it is. The statements are
:mod:`workerpool.sql.control`; ``pool.cancel`` runs them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .attempt import storable
from .errors import InvalidFilter
from .states import LIVE_STATES, JobState
from .validation import check_filter, check_ids, check_tag_filter

#: The longest reason a cancel keeps (it is stored in each job's history and the audit trail).
MAX_REASON = 1000

CANCELLED = "cancelled"  # it was queued: cancelled now
STOPPING = "asked to stop"  # it runs: its worker stops it
FINISHED = "already finished"  # done, dead or cancelled before: nothing changed


def check_reason(reason: Any) -> str | None:
    """A cancel's reason: None, or text PostgreSQL can store of at most MAX_REASON characters."""
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise InvalidFilter(f"reason must be a string, got {type(reason).__name__}")
    if len(reason) > MAX_REASON:
        raise InvalidFilter(f"reason must be at most {MAX_REASON} characters, got {len(reason)}")
    if storable(reason) != reason:
        raise InvalidFilter("reason must not contain NUL or a lone surrogate")
    return reason


def verdict(state: str) -> str:
    """What a cancel does to a job in ``state`` (or did, read after it)."""
    if state in (JobState.PENDING, JobState.FAILED):
        return CANCELLED
    return STOPPING if state == JobState.PROCESSING else FINISHED


@dataclass(frozen=True)
class Selection:
    """Which jobs: explicit ids, or the live jobs of a queue and/or carrying every one of
    ``tags`` (optionally one task, one state)."""

    ids: tuple[int, ...] | None = None
    queue: str | None = None
    task: str | None = None
    state: str | None = None
    tags: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tags", check_tag_filter(self.tags))
        if (self.ids is None) == (self.queue is None and self.tags is None):
            raise InvalidFilter(
                "give job ids or a queue and/or tags (with optional task and"
                " state), not both and not neither"
            )
        if self.ids is not None:
            object.__setattr__(self, "ids", check_ids(self.ids))
        elif self.queue is not None:
            check_filter("queue", self.queue)
        if self.ids is None and self.task is not None:
            check_filter("task", self.task)
        if self.ids is not None and (self.task or self.state):
            raise InvalidFilter("task and state filters go with a queue or tags, not with job ids")
        if self.state is not None and self.state not in LIVE_STATES:
            raise InvalidFilter(
                f"state must be one of {', '.join(LIVE_STATES)} (the states a"
                f" job can be cancelled in); got {self.state!r}"
            )


@dataclass(frozen=True)
class CancelResult:
    """Per job id what the cancel did (or, with ``dry_run``, would do), and its state then."""

    verdicts: dict[int, str]
    states: dict[int, str]
    dry_run: bool = False
    by: str = ""

    @classmethod
    def planned(cls, before: Mapping[int, str], by: str) -> CancelResult:
        """A dry run: what a cancel of jobs in these states would do."""
        return cls(
            {job_id: verdict(state) for job_id, state in before.items()}, dict(before), True, by
        )

    @classmethod
    def done(
        cls,
        before: Mapping[int, str],
        changed: Mapping[int, str],
        others: Mapping[int, str],
        by: str,
    ) -> CancelResult:
        """After the cancel: ``changed``, the jobs it cancelled or asked to stop, and
        ``others``, those it left alone (finished meanwhile, or asked to stop before), each with
        its state after it."""
        verdicts = {
            job_id: CANCELLED if state == JobState.CANCELLED else STOPPING
            for job_id, state in changed.items()
        }
        verdicts.update((job_id, verdict(state)) for job_id, state in others.items())
        states = {**changed, **others}
        return cls({i: verdicts[i] for i in before}, {i: states[i] for i in before}, False, by)

    def ids(self, verdict: str) -> list[int]:
        return [job_id for job_id, seen in self.verdicts.items() if seen == verdict]

    @property
    def cancelled(self) -> list[int]:
        return self.ids(CANCELLED)

    @property
    def stopping(self) -> list[int]:
        return self.ids(STOPPING)

    @property
    def finished(self) -> list[int]:
        return self.ids(FINISHED)

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "by": self.by,
            "jobs": [
                {"id": job_id, "verdict": verdict, "state": self.states.get(job_id)}
                for job_id, verdict in self.verdicts.items()
            ],
        }
