"""`workerpool run` whose children for one worker type fail while they boot.

``python -m tests.apps.boot_failure WORKER run APP:POOL [options of workerpool run]`` runs the
real supervisor (real forks, signals, restart backoff and FATAL) with a child factory whose
children for WORKER raise while building their runner, as a child does whose import, settings
or database fail at boot. The other worker types run as usual.
"""

from __future__ import annotations

import sys
from typing import Any

from workerpool.cli import build_parser, run
from workerpool.model.specs import WorkerType
from workerpool.process.supervisor import Supervisor


class BootFault(RuntimeError):
    """The injected failure."""


def main(argv: list[str]) -> int:
    failing, *run_argv = argv
    pool, settings = run.load(build_parser().parse_args(run_argv))
    real = run.runner_factory(pool, settings)

    def runner(worker: WorkerType, **kwargs: Any) -> Any:
        if worker.name == failing:
            raise BootFault(f"{worker.name}: injected boot failure")
        return real(worker, **kwargs)

    return Supervisor(
        settings,
        child_factory=run.child_factory(pool, runner),
        releaser_factory=run.releaser_factory(pool, settings),
    ).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
