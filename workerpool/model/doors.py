"""What the doors in (SQL's ``workerpool_enqueue``, ``POST /api/jobs``) know of an application:
each task's row in ``workerpool_tasks`` and each bounded queue's, built from the registry.

The workers write them at start, so a producer without the application's code enqueues with
the same defaults and argument checks as ``pool.enqueue``.
"""

from __future__ import annotations

import inspect
from typing import Any

from .registry import Registry
from .specs import TaskSpec


def task_rows(registry: Registry, queue: str | None = None) -> list[dict[str, Any]]:
    """One ``workerpool_tasks`` row per task (of ``queue`` only, if given)."""
    return [
        {
            "task": spec.name,
            "queue": spec.queue,
            "max_attempts": spec.max_attempts,
            "priority": spec.priority,
            "payload_version": spec.version,
            "payload_limit": registry.payload_limit,
            "params": task_params(spec),
        }
        for spec in registry.tasks.values()
        if queue is None or spec.queue == queue
    ]


def bounds(registry: Registry, queue: str | None = None) -> dict[str, int]:
    """The declared ``max_pending`` of each bounded queue (of ``queue`` only, if given)."""
    return {
        name: spec.max_pending
        for name, spec in registry.queues.items()
        if spec.max_pending is not None and (queue is None or name == queue)
    }


def task_params(spec: TaskSpec) -> dict[str, Any] | None:
    """The arguments a typed handler takes after its ``Job`` (the payload's keys):
    ``{"required": [...], "accepted": [...]}`` (``accepted`` None when it takes ``**kwargs``);
    None for a handler that takes the payload as a dict (any JSON object will do)."""
    try:
        parameters = list(inspect.signature(spec.fn).parameters.values())[1:]
    except (TypeError, ValueError):  # a builtin or a callable without a signature
        return None
    named = [p for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if not named:
        return None
    open_ended = any(p.kind is p.VAR_KEYWORD for p in parameters)
    return {
        "required": [p.name for p in named if p.default is p.empty],
        "accepted": None if open_ended else [p.name for p in named],
    }
