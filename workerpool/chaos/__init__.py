"""Fault injection with a history checker: ``python -m workerpool.chaos`` (docs/chaos.md).

:mod:`.schedule` (the seeded faults), :mod:`.cluster` (throwaway PostgreSQL clusters),
:mod:`.fleet` (the supervisors), :mod:`.app` (the handlers the supervisors run) and
:mod:`.ledger` (what each execution records), :mod:`.producers`, :mod:`.faults` (the injector),
:mod:`.checker`, :mod:`.runner` (one run), :mod:`.report` (the table and the JSON).
"""
