"""The maintenance loop's documented entry points, kept where the docs name them.

``python -m workerpool.maintenance APP:POOL`` runs the maintenance loop in the foreground
(:mod:`.__main__`); ``workerpool.maintenance.health.read(conn)`` reads the jobs table's health.
The duties themselves live in :mod:`workerpool.runtime.maintenance`.
"""

from __future__ import annotations

from ..runtime.maintenance import health

__all__ = ["health"]
