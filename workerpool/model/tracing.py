"""OpenTelemetry traces across the queue: the enqueuer's trace continues in the worker.

An enqueue runs in a ``workerpool.enqueue`` span (kind PRODUCER) whose W3C trace context
(``traceparent``/``tracestate``, as :func:`opentelemetry.propagate.inject` writes them) is stored
with the job. The worker parents each attempt's ``workerpool.run`` span (kind CONSUMER) on it, so
the request that enqueued a job and the handler that ran it are one trace.

Only ``opentelemetry-api`` is needed (``pip install 'workerpool[otel]'``); the application
configures the SDK, exporters and sampling as it would for any other library. Without the API
installed, :data:`ENABLED` is False, the import below is the whole cost, and every function here
returns at once: no span, no context stored (the column stays NULL). With the API but no SDK
(no tracer provider set), no span is made either; an enqueue only passes on a context that is
already current (one extracted from an incoming request, say).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from typing import Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # the [otel] extra is not installed: tracing is off, at no cost
    ENABLED = False
else:
    ENABLED = True

logger = logging.getLogger("workerpool.tracing")

SYSTEM = "workerpool"
#: Span attribute names (``messaging.*`` from OpenTelemetry's messaging conventions).
QUEUE, TASK, JOB_ID = "workerpool.queue", "workerpool.task", "workerpool.job.id"
ATTEMPT, OUTCOME, COUNT = "workerpool.attempt", "workerpool.outcome", "workerpool.job.count"

#: Outcomes that mean the attempt failed (the span's status is ERROR).
FAILED_OUTCOMES = frozenset({"fail", "permanent", "timed_out", "abandoned"})

_NO_SPAN: contextlib.nullcontext[None] = contextlib.nullcontext(None)


_TRACER: Any = None


def _tracer() -> Any:
    # Made on first use: a tracer got before the application sets its provider is a ProxyTracer,
    # which follows the global provider once one is set.
    global _TRACER
    if _TRACER is None:
        _TRACER = trace.get_tracer("workerpool")
    return _TRACER


def _recording() -> bool:
    """Whether an SDK (any real provider) is installed: until then the API's spans record
    nothing, and a span is not worth its cost (an enqueue still passes the current context on)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


# -- the enqueue side ----------------------------------------------------------------------------


def enqueue_span(
    queue: str | None, task: str | None, count: int = 1
) -> contextlib.AbstractContextManager[str | None]:
    """A ``workerpool.enqueue`` span around a write; yields the trace context to store (JSON
    text for the ``trace_context`` column), or None when there is no trace to continue."""
    if not ENABLED:
        return _NO_SPAN
    if not _recording():  # e.g. a context extracted from a request, with no SDK to record
        return contextlib.nullcontext(current_context())
    return _enqueue_span(queue, task, count)


@contextlib.contextmanager
def _enqueue_span(queue: str | None, task: str | None, count: int) -> Iterator[str | None]:
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        COUNT: count,
    }
    if queue is not None:
        attributes.update({QUEUE: queue, "messaging.destination.name": queue})
    if task is not None:
        attributes[TASK] = task
    with _tracer().start_as_current_span(
        "workerpool.enqueue", kind=SpanKind.PRODUCER, attributes=attributes
    ):
        yield current_context()


def current_context() -> str | None:
    """The current span's W3C trace context as JSON text, or None (no valid span, or off)."""
    if not ENABLED:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return json.dumps(carrier, separators=(",", ":")) if carrier else None


# -- the worker side -----------------------------------------------------------------------------


class RunSpan:
    """The ``workerpool.run`` span of one attempt, current on the handler's thread while it runs.

    ``finish(outcome, exc)`` records how the attempt ended: the outcome attribute (an
    :class:`~workerpool.model.states.OutcomeKind` value, or ``timed_out``/``abandoned`` when
    the worker decided the attempt without the handler), the exception (as a span event with
    its traceback) and an ERROR status for a failure.
    """

    def __init__(self, row: Any) -> None:
        parent = _extract(getattr(row, "trace_context", None))
        attributes = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.destination.name": row.queue,
            "messaging.message.id": str(row.id),
            QUEUE: row.queue,
            TASK: row.task,
            JOB_ID: row.id,
            ATTEMPT: row.attempts,
        }
        self._span = _tracer().start_span(
            "workerpool.run", context=parent, kind=SpanKind.CONSUMER, attributes=attributes
        )
        self._token = otel_context.attach(trace.set_span_in_context(self._span))

    def finish(self, outcome: str, exc: BaseException | None) -> None:
        span = self._span
        try:
            span.set_attribute(OUTCOME, outcome)
            if exc is not None:
                span.record_exception(exc, escaped=False)
            if outcome in FAILED_OUTCOMES:
                span.set_status(Status(StatusCode.ERROR, _describe(exc, outcome)))
        except Exception:  # e.g. an exception whose __str__ raises: the outcome matters more
            logger.warning(
                "could not record the outcome on the run span",
                exc_info=True,
                extra={"event": "trace_record_failed"},
            )
        finally:
            otel_context.detach(self._token)
            span.end()


def run_span(row: Any) -> RunSpan | None:
    """Start the run span of a claimed row (None when tracing is off or records nothing)."""
    return RunSpan(row) if ENABLED and _recording() else None


#: How long a child process waits for its buffered spans to export when it exits (milliseconds).
FLUSH_TIMEOUT_MS = 2000


def flush(timeout_millis: int = FLUSH_TIMEOUT_MS) -> None:
    """Export the spans a processor still buffers (a BatchSpanProcessor's). A worker child ends
    with ``os._exit``, which runs no atexit hook: without this its last spans would be lost."""
    if not ENABLED or not _recording():
        return
    force_flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if force_flush is None:
        return
    try:
        force_flush(timeout_millis)
    except Exception:  # an exporter's failure must not change how the child exits
        logger.warning(
            "could not flush the spans at exit",
            exc_info=True,
            extra={"event": "trace_flush_failed"},
        )


def _describe(exc: BaseException | None, outcome: str) -> str:
    if exc is None:
        return outcome
    try:
        return f"{type(exc).__name__}: {exc}"[:500]
    except Exception:  # its __str__ raised
        return type(exc).__name__


def _extract(stored: Any) -> Any:
    """The parent context from a stored ``trace_context`` (a dict from JSONB), or None."""
    if not stored or not isinstance(stored, dict):
        return None
    return propagate.extract({str(k): str(v) for k, v in stored.items()})
