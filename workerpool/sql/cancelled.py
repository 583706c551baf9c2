"""A row an operator asked to stop ends ``cancelled`` wherever its attempt ends.

Cancelling a running job writes a ``cancel_request`` on the row and tells its owner. Until the
owner acts on it, the attempt can end another way: the handler fails or snoozes, a drain gives
the job back, a prefetched job is returned unstarted, or the owner dies and the recovery takes
the row. Each of those writes would put the row back in line and the request would be forgotten
(the job would run again), so each passes its new values through :func:`or_cancelled`. A ``done``
or ``dead`` ending stands: the job finished before the request could stop it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import case, func

from ..model.states import JobState
from .schema import jobs

#: The row carries an operator's request to stop.
ASKED = jobs.c.cancel_request.isnot(None)


def history(request: Any = jobs.c.cancel_request, errors: Any = jobs.c.errors) -> Any:
    """``errors`` plus the entry a cancel leaves: the request (by, message, at) and the attempt."""
    stamped = func.jsonb_build_object("attempt", jobs.c.attempts, "type", "Cancelled").op("||")(
        request
    )
    return errors.op("||")(func.jsonb_build_array(stamped))


def or_cancelled(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` of a write that ends an attempt, unless a cancel was asked: then the row ends
    ``cancelled`` now, with what ``values`` adds to ``errors`` and the request after it, and no
    other column changes (the attempt is not refunded: it ran)."""
    out = {
        name: case((ASKED, getattr(jobs.c, name)), else_=value) for name, value in values.items()
    }
    state = values["state"]
    # .value: a CASE types its parameters by their Python type; a plain str binds as text
    out["state"] = case(
        (ASKED, JobState.CANCELLED.value),
        else_=state.value if isinstance(state, JobState) else state,
    )
    out["finished_at"] = case((ASKED, func.now()), else_=values.get("finished_at"))
    errors = values.get("errors", jobs.c.errors)
    out["errors"] = case((ASKED, history(errors=errors)), else_=errors)
    return out
