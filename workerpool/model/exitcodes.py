"""Every exit code workerpool's processes and commands use, with its meaning.

The child codes are the contract between a child and the supervisor (gunicorn keeps its own the
same way): the supervisor reads them to decide between a restart, a back-off and a release.
Standard library only.
"""

from __future__ import annotations

OK = 0
#: A child's runner raised; a command failed (database error, refused input).
FAILURE = 1
#: A command's usage was wrong (argparse's own code).
USAGE = 2
#: A child could not build its runner (import error, bad configuration, no database at boot);
#: the supervisor exits with it too once a worker type kept failing at boot.
BOOT_FAILED = 3
#: A child exits with this when jobs are still claimed (the database refused the release):
#: the supervisor's releaser then takes its claims.
UNRELEASED = 69
#: A handler ignored its timeout or its cancel: restart this child.
RECYCLE = 75
#: ``workerpool healthcheck``: a heartbeat file is missing or stale.
UNHEALTHY = 1
