"""Helpers for tests of your handlers (and of workerpool itself), on a real database.

- :func:`drain` runs due jobs in this process through the worker's outcome rules;
- :func:`enqueued`, :func:`assert_enqueued`, :func:`assert_not_enqueued` read the jobs table;
- :func:`crash_points` crashes a handler at each durable point and checks its effects;
- ``pool.testing_mode("inline")`` runs each job right after its enqueuing transaction commits;
- the pytest plugin (:mod:`workerpool.testing.plugin`, registered as an entry point) gives the
  ``workerpool_pool`` fixture on a throwaway database.
"""

from __future__ import annotations

from .assertions import ANY, assert_enqueued, assert_not_enqueued, enqueued
from .crash_points import CrashPointFailure, crash_points
from .runner import RETRY_MODES, Ran, call_handler, claim, drain, make_job, run_claimed

__all__ = [
    "ANY",
    "RETRY_MODES",
    "CrashPointFailure",
    "Ran",
    "assert_enqueued",
    "assert_not_enqueued",
    "call_handler",
    "claim",
    "crash_points",
    "drain",
    "enqueued",
    "make_job",
    "run_claimed",
]
