"""`workerpool demo`: an example backend's jobs under a real supervisor, a live view, a verdict.

This package ships next to ``workerpool`` in the same distribution but is not part of the
runtime: nothing in ``workerpool`` imports it except the ``demo`` command, lazily.

- :mod:`.app` is the application the demo runs: the background jobs of a small web backend
  (``email``, ``user_deletion``, ``housekeeping``), with :mod:`.fake_provider` as its email
  provider and :mod:`.session_cleanup` as its hourly cron job.
- :mod:`.runner` plays the scenario: a fresh database (:mod:`.database`), ``workerpool run`` as
  a child process (:mod:`.process`), a burst of web requests (:mod:`.scenario`), the live view
  (:mod:`.view`) and the summary whose checks decide the exit code (:mod:`.summary`).
"""

from __future__ import annotations

from .options import Options
from .runner import main

__all__ = ["Options", "main"]
