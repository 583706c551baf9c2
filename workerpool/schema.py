"""workerpool's tables, at the path an application's Alembic ``env.py`` names
(``target_metadata=[your_metadata, workerpool.schema.metadata]``, docs/deployment.md).

The tables themselves are defined in :mod:`workerpool.sql.schema`.
"""

from __future__ import annotations

from .sql.schema import metadata

__all__ = ["metadata"]
