"""What the maintenance child runs: cron scheduling, the abandoned sweep, pruning, worker registry.

The duties (:class:`Maintenance`, one pass at a time) live in :mod:`.duties`; the loop that runs
them every ``interval`` seconds (:class:`MaintenanceLoop`) in :mod:`.loop`. The supervisor forks
one maintenance child per replica and runs that loop in it; without the supervisor,
``python -m workerpool.maintenance APP:POOL`` runs the same loop in the foreground.
"""

from __future__ import annotations

from .duties import MAINTENANCE_TYPE, Maintenance
from .loop import MaintenanceLoop

__all__ = ["MAINTENANCE_TYPE", "Maintenance", "MaintenanceLoop"]
