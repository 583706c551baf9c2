"""What `workerpool --help` and each subcommand's help tell the person running them: what the
tool is for, an example of each command (shown as written: RawDescriptionHelpFormatter), and
the options many commands share (``--app``, ``--as``), added by one function each."""

from __future__ import annotations

import argparse
from typing import Any

DESCRIPTION = """\
Durable background jobs for Python on PostgreSQL.

Your application declares queues and tasks on a WorkerPool and enqueues jobs (in its own
transaction if it likes); `workerpool run` starts a supervisor that forks one worker process
per queue, keeps them up, and runs the jobs: retried with backoff, dead-lettered when they keep
failing, never lost when a process dies. The database is $WORKERPOOL_DATABASE_URL (unset: an
embedded PostgreSQL under ./.workerpool, with `pip install 'workerpool[embedded]'`)."""

EPILOG = """\
getting started:
  workerpool demo                          # see it work: a real supervisor on example jobs
  workerpool migrate                       # create or upgrade workerpool's tables
  workerpool run myapp.jobs:pool           # run the workers of every queue
  workerpool status                        # what is queued, running, dead; who is alive

`workerpool COMMAND --help` explains each command, with an example."""

EXAMPLES: dict[str, str] = {
    "migrate": """\
example:
  workerpool migrate                       # on $WORKERPOOL_DATABASE_URL, to the newest
  workerpool migrate 0002                  # to a given revision
  workerpool migrate --app myapp.jobs:pool  # where the app's pool says (its URL, its schema)
  DJANGO_SETTINGS_MODULE=mysite.settings \
    workerpool migrate --app workerpool.contrib.django.worker:pool   # in Django's database

workerpool's tables keep their own Alembic version table (workerpool_alembic_version);
an application's own Alembic history is not touched (docs/deployment.md).""",
    "enqueue": """\
example:
  workerpool enqueue myapp.jobs:pool send_welcome --payload '{"user_id": 42}' --key welcome:42

Prints the job's id. A key already taken prints the existing job's id and writes nothing.""",
    "queue": """\
example:
  workerpool queue bound email 100000      # refuse enqueues past 100k jobs waiting to run
  workerpool queue unbound email
  workerpool queue bounds --json

A bound set here binds SQL's workerpool_enqueue and POST /api/jobs; a pool's own
pool.queue(NAME, max_pending=N) binds its Python enqueues, and its workers write it here at
start (docs/doors.md).""",
    "queue bound": """\
example:
  workerpool queue bound email 100000

An enqueue that would take the queue past N jobs waiting to run (pending, retrying, waiting)
is refused: QueueFull, HTTP 429, SQLSTATE WP001; nothing is written.""",
    "signal": """\
example:
  workerpool signal paid:inv_42 --payload '{"amount": 42}'

The jobs waiting in job.wait_for("paid:inv_42") run again at once and get the payload; a job
that starts waiting later gets it too. The first signal of a name stands: sending it again
exits non-zero and changes nothing.""",
    "status": """\
example:
  workerpool status
  workerpool status --json | jq '.queues'
  workerpool status --app myapp.jobs:pool  # judge rows by your code, not by live workers""",
    "dead": """\
example:
  workerpool dead list --queue email --since 2h
  workerpool dead retry --all --task send_welcome --dry-run
  workerpool dead purge --older-than 30d""",
    "dead list": """\
example:
  workerpool dead list --queue email --reason exhausted --since 2h
  workerpool dead list --limit 0 --json    # every match, for scripts""",
    "dead retry": """\
example:
  workerpool dead retry 1041 1042
  workerpool dead retry --all --task send_welcome --since 1h --dry-run

A replayed job is pending again with its attempts reset and its error history kept. Before
anything changes, the jobs' tasks are checked against what can run them: the tasks that live
workers registered (the workers table), or, with --app APP:POOL, that application's tasks.
A task neither knows refuses the whole replay and changes nothing; with no live worker and no
--app there is nothing to check against, so it refuses too: pass --app.""",
    "batch": """\
example:
  workerpool batch show 17
  workerpool batch show 17 --json | jq '.done, .finished'""",
    "job": """\
example:
  workerpool job show 42
  workerpool job show 42 --json | jq '.errors[].worker'""",
    "rerun": """\
example:
  workerpool rerun 42 --from-step charge   # keep the steps before 'charge', run it again
  workerpool rerun 42                      # from the handler's first line, no step kept

A done, dead or cancelled job goes back in line with its attempts reset; the rerun is in its
history and the audit trail. A live job, or a step the job never recorded (the error lists its
steps), exits non-zero and changes nothing.""",
    "job show": """\
example:
  workerpool job show 42                   # state, attempts, errors, result, steps, times
  workerpool job show 42 --json""",
    "batch show": """\
example:
  workerpool batch show 17                 # members by state, a progress bar, its callbacks
  workerpool batch show 17 --json

A batch is finished once its last member has ended (done, dead or cancelled): its callback
jobs were enqueued then, once. An unknown id (never opened, or pruned) exits non-zero.""",
    "dead purge": """\
example:
  workerpool dead purge --older-than 30d --dry-run
  workerpool dead purge --older-than 7d --queue email""",
    "run": """\
example:
  workerpool run myapp.jobs:pool
  workerpool run myapp.jobs:pool --queue email --queue reports --grace 60
  workerpool run myapp.jobs:pool --log-format json   # one JSON object a line, for collectors

Stops cleanly on SIGTERM or SIGINT: children drain their jobs, then exit.""",
    "web": """\
example:
  workerpool web myapp.jobs:pool                       # http://127.0.0.1:8080/
  workerpool web --read-only --port 9000
  WORKERPOOL_WEB_TOKEN=$(openssl rand -hex 24) workerpool web myapp.jobs:pool --bind 0.0.0.0

A non-loopback --bind is refused unless $WORKERPOOL_WEB_TOKEN is set: every request must then
send it as a Bearer token or as the basic-auth password. Needs `pip install 'workerpool[web]'`
(docs/dashboard.md).""",
    "healthcheck": """\
example:
  workerpool healthcheck                   # a Kubernetes exec probe: exit 0 iff all fresh
  workerpool healthcheck email --max-age 30
  workerpool healthcheck --app myapp.jobs:pool   # several apps' supervisors on this host""",
    "demo": """\
example:
  workerpool demo
  workerpool demo --chaos --duration 30    # SIGKILL workers meanwhile; nothing is lost""",
    "embedded": """\
example:
  workerpool embedded status               # is the embedded PostgreSQL of ./.workerpool running?
  workerpool embedded stop                 # stop it (open sessions are ended)

A command that starts the embedded PostgreSQL (no $WORKERPOOL_DATABASE_URL) leaves it running
for the next one; `workerpool demo` and the test suite stop the one they started.""",
}


def add_command(sub: Any, name: str, **options: Any) -> argparse.ArgumentParser:
    """``sub.add_parser(name)`` with the command's example as its epilog, shown as written."""
    return sub.add_parser(
        name.split()[-1],
        epilog=EXAMPLES.get(name),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **options,
    )


def add_app_option(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    """``--app APP:POOL``: the application whose pool the command acts on (``pool_for``);
    ``help`` says what the app decides for this command."""
    parser.add_argument("--app", metavar="APP:POOL", default=None, help=help)


def add_as(parser: argparse.ArgumentParser) -> None:
    """``--as NAME``: who acts, for the audit trail."""
    parser.add_argument(
        "--as",
        dest="as_name",
        default=None,
        metavar="NAME",
        help="who acts, for the audit trail (default: user@host)",
    )
