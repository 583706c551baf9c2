"""How far behind the primary a streaming replica is, read on the replica itself.

``now() - pg_last_xact_replay_timestamp()`` alone grows while the primary is idle (nothing to
replay, the last replayed commit only gets older); when everything received is replayed the
replica is as current as the primary has let it be, so the lag is 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, text

# lag: None columns on a primary (not in recovery). Index: none, no table.
_LAG = text("""
SELECT pg_is_in_recovery() AS standby,
       CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0.0
            ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8 END AS lag,
       pg_last_xact_replay_timestamp() AS replayed_at
""")


@dataclass(frozen=True)
class ReplicaLag:
    seconds: float | None  # None: nothing replayed yet
    replayed_at: object  # the last replayed commit's time (a datetime), or None

    def lag_text(self) -> str:
        if self.seconds is None:
            return "which has replayed nothing yet"
        return f"{self.seconds:.1f} s behind the primary"

    def as_json(self) -> dict[str, object]:
        at = self.replayed_at
        return {
            "lag_seconds": self.seconds,
            "replayed_at": at.isoformat() if hasattr(at, "isoformat") else None,
        }


def lag(conn: Connection) -> ReplicaLag | None:
    """The replica's lag; None when ``conn`` is on a primary."""
    row = conn.execute(_LAG).one()
    if not row.standby:
        return None
    return ReplicaLag(None if row.lag is None else max(0.0, float(row.lag)), row.replayed_at)
