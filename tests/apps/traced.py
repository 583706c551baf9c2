"""An application traced with the OpenTelemetry SDK, for tests/processes/test_tracing.py.

When ``TEST_SPANS_FILE`` is set (in the `workerpool run` subprocess), importing this module
installs an SDK TracerProvider whose exporter appends each finished span to that file as one JSON
line: the test process reads what the worker's child processes exported.

The processor is a BatchSpanProcessor, as in production, set up in the supervisor before it forks
(the SDK restarts its export thread in each child), with a schedule far longer than the test: the
spans reach the file only when a child flushes them as it exits.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence

from opentelemetry import trace

from workerpool import Backoff, Job, Permanent, WorkerPool

tracer = trace.get_tracer("tests.apps.traced")


def build(url: object = None) -> WorkerPool:
    pool = WorkerPool(url)
    pool.queue("traced", concurrency=2, drain_timeout=1, hang_timeout=5, poll_interval=0.1)

    @pool.task(queue="traced")
    def ok(job: Job) -> None:
        with tracer.start_as_current_span("handler.work"):  # a child of the run span
            pass

    @pool.task(queue="traced")
    async def ok_async(job: Job) -> None:
        await asyncio.sleep(0)
        with tracer.start_as_current_span("handler.work"):
            pass

    @pool.task(queue="traced", max_attempts=2, backoff=Backoff(base=0.1, factor=1, cap=0.1))
    def flaky(job: Job) -> None:
        """Fails its first attempt (an ordinary error, retried), then gives up for good."""
        if job.attempt == 1:
            raise ValueError(f"boom on attempt {job.attempt}")
        raise Permanent("no point retrying")

    return pool


class FileSpanExporter:
    """Appends each span as a JSON line (a SpanExporter in all but the import of its base)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence) -> object:
        from opentelemetry.sdk.trace.export import SpanExportResult

        lines = "".join(json.dumps(span_record(span)) + "\n" for span in spans)
        with open(self.path, "a") as out:  # O_APPEND: lines from several children stay whole
            out.write(lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def span_record(span) -> dict:
    """The parts of a finished span the test checks, ids as hex."""
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{span.context.trace_id:032x}",
        "span_id": f"{span.context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "attributes": dict(span.attributes),
        "status": span.status.status_code.name,
        "events": [{"name": e.name, "attributes": dict(e.attributes)} for e in span.events],
        "pid": os.getpid(),
    }


def _install_file_exporter(path: str) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(
        BatchSpanProcessor(FileSpanExporter(path), schedule_delay_millis=600_000)
    )
    trace.set_tracer_provider(provider)


if os.environ.get("TEST_SPANS_FILE"):
    _install_file_exporter(os.environ["TEST_SPANS_FILE"])

pool = build()
