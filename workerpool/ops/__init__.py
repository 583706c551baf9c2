"""Layer 6, operating it: what an operator asks of a running system.

``workerpool status`` (:mod:`.status`), why a job is waiting (:mod:`.why`, the one answer the
command line and the dashboard share), the dead-letter queue (:mod:`.dead`), and the
least-privilege roles (:mod:`.roles`).

Imports: every layer above it (model, sql, runtime, process, the client); never the command
line, the dashboard or testing.
"""
