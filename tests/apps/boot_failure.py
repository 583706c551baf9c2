"""`workerpool run` whose children for one worker type fail while they boot.

``python -m tests.apps.boot_failure WORKER run APP:POOL [options of workerpool run]`` runs the
real supervisor (real forks, signals, restart backoff and FATAL) with a child factory whose
children for WORKER raise while building their runner, as a child does whose import, settings
or database fail at boot. The other worker types run as usual.
"""

from __future__ import annotations

import sys
from typing import Any

from workerpool import cli
from workerpool.process.child import Child, build_runner
from workerpool.process.settings import WorkerType


class BootFault(RuntimeError):
    """The injected failure."""


def fail_at_boot(pool: Any, worker: WorkerType, **kwargs: Any) -> Any:
    raise BootFault(f"{worker.name}: injected boot failure")


def main(argv: list[str]) -> int:
    failing, *run_argv = argv

    def child_factory(pool: Any, worker: WorkerType, **kwargs: Any) -> Child:
        factory = fail_at_boot if worker.name == failing else build_runner
        return Child(pool, worker, runner_factory=factory, **kwargs)

    args = cli.build_parser().parse_args(run_argv)
    return cli.build_supervisor(args, child_factory=child_factory).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
