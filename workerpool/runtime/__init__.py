"""Layer 3, the runtime: what runs inside a child process.

A queue's worker (:mod:`.worker`: the loop and its parts), the maintenance duties
(:mod:`.maintenance`: cron, the abandoned sweep, pruning, the table's health), and the release
of a dead child's claims (:mod:`.release`). Built in the parent before a fork from what they
need (the registry's specs and hooks, a database URL), started after it.

Imports: :mod:`workerpool.model` and :mod:`workerpool.sql`; never the client, the process
layer or operator code.
"""
