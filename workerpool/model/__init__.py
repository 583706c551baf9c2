"""Layer 1, the model: what an application declares and what a job is, with no engine, no SQL
and no I/O.

The registry of queues, tasks and crons and the specs it holds (:mod:`.registry`,
:mod:`.specs`, :mod:`.validation`, :mod:`.limits`), the states (:mod:`.states`), every
exception raised on purpose (:mod:`.errors`), the ``Job`` a handler sees and the lease a worker
holds (:mod:`.job`), retry delays (:mod:`.backoff`), payload checks (:mod:`.payload`), what one
attempt comes to (:mod:`.attempt`), the notices hooks receive (:mod:`.notices`), and the exit
codes a child and its parent agree on (:mod:`.exitcodes`). Beside them, the two reporting seams
every process uses: the metrics recorder (:mod:`.metrics`, a no-op until switched on) and
tracing spans (:mod:`.tracing`, a no-op without OpenTelemetry).

Imports: the standard library and third-party libraries only; nothing else of workerpool.
"""
