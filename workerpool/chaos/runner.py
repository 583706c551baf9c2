"""One chaos run: a database, a fleet of supervisors, producers, the fault schedule, the drain,
then the history read back and checked."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.engine import URL

from ..migrate import upgrade
from ..process import settings
from ..sql import db
from ..sql import history as sql_history
from . import cluster as clusters
from .checker import History, Verdict, check, recovery_times
from .faults import Injector, Servers
from .fleet import Fleet, group_members
from .ledger import LEDGER_URL_ENV, create_tables
from .producers import Producers
from .proxy import BlackholeProxy
from .schedule import FAILOVER, PROCESS_FAULTS, SERVER_FAULTS, Fault, plan

log = logging.getLogger("workerpool.chaos")

#: Written on the database a run creates; a run drops only a database that carries it.
MARK = "created by workerpool.chaos: dropped at the end of the run"
DRAIN_WAIT = 15.0  # seconds a SIGTERMed supervisor gets before the run kills its group
SETTLE_CAP = 10  # the drain waits at most this many settle timeouts in all
EXPECTED_CHILDREN = 4  # three queues and the maintenance child

#: The worker's log event for rows a claim took whose commit reply was lost.
UNHELD_RETURNED = " unheld_returned: "


@dataclass(frozen=True)
class Options:
    seed: int
    duration: float
    server: URL | None  # None: a throwaway cluster the run creates (server faults allowed)
    failover: str | None  # "sync" or "async": a standby and one failover; None: neither
    supervisors: int = 2
    rate: float = 40.0
    mean_gap: float = 2.0
    settle_timeout: float = 30.0
    logs: Path | None = None  # keep the supervisors' logs here (default: removed with the run)


@dataclass
class Result:
    schedule: list[Fault]
    injector: Injector
    verdict: Verdict
    recovery: dict[str, list[float]]
    fleet: Fleet
    elapsed: float
    target: str
    phases: dict[str, float]  # seconds from the start to the end of each phase


def kinds(options: Options) -> tuple[str, ...]:
    return PROCESS_FAULTS + (SERVER_FAULTS if options.server is None else ())


def run(options: Options, on_schedule: Any = None) -> Result:
    schedule = plan(
        options.seed,
        options.duration,
        options.mean_gap,
        kinds(options),
        failover=options.failover is not None,
    )
    if on_schedule is not None:
        on_schedule(schedule)
    with contextlib.ExitStack() as stack:
        root = stack.enter_context(clusters.workspace())
        servers, url = stack.enter_context(_database(options, root))
        if options.logs is not None:
            options.logs.mkdir(parents=True, exist_ok=True)
        return _run(options, schedule, servers, url, options.logs or root)


@contextlib.contextmanager
def _database(options: Options, root: Path) -> Iterator[tuple[Servers, URL]]:
    """The run's database: on the user's server, or on clusters made here (and removed)."""
    servers = Servers()
    try:
        if options.server is None:
            servers.primary = clusters.Cluster(root, "primary")
            synchronous = options.failover == "sync"
            extra = (
                {"synchronous_standby_names": f"'{clusters.STANDBY_NAME}'"} if synchronous else {}
            )
            servers.primary.initdb(extra)
            servers.primary.start()
            servers.asynchronous = options.failover == "async"
            if options.failover:
                servers.standby = clusters.Cluster(root, "standby")
                servers.primary.base_backup_into(servers.standby)
                servers.standby.start()
        server = options.server or servers.primary.url()  # type: ignore[union-attr]
        name = f"wp_chaos_{secrets.token_hex(5)}"
        _admin(server, f'CREATE DATABASE "{name}"', f"COMMENT ON DATABASE \"{name}\" IS '{MARK}'")
        try:
            url = server.set(database=name)
            if servers.standby is not None:
                url = _multi_host(url, [servers.primary.port, servers.standby.port])  # type: ignore[union-attr]
            upgrade(url)
            with psycopg.connect(autocommit=True, **db.connect_kwargs(url)) as conn:
                create_tables(conn)
            yield servers, url
        finally:
            if options.server is not None:
                _drop_marked(options.server, name)
    finally:
        for made in (servers.standby, servers.primary):
            if made is not None:
                clusters.stop_quietly(made)


def _multi_host(url: URL, ports: list[int]) -> URL:
    hosts = tuple(f"{url.host}:{port}" for port in ports)
    return URL.create(
        url.drivername,
        url.username,
        url.password,
        None,
        None,
        url.database,
        {"host": hosts, "target_session_attrs": "read-write"},
    )


def _admin(server: URL, *statements: str) -> None:
    with psycopg.connect(autocommit=True, **db.connect_kwargs(server)) as conn:
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]


def _drop_marked(server: URL, name: str) -> None:
    with psycopg.connect(autocommit=True, **db.connect_kwargs(server)) as conn:
        row = conn.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
            (name,),
        ).fetchone()
        if row is not None and row[0] == MARK:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')  # type: ignore[arg-type]


def _clock_offset(url: URL) -> float:
    with psycopg.connect(autocommit=True, **db.connect_kwargs(url)) as conn:
        before = time.time()
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
        after = time.time()
    return float(row[0]) - (before + after) / 2  # type: ignore[index]


def _env(workers: URL, direct: URL) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKERPOOL_", "WORKER_"))}
    env[settings.URL_ENV] = workers.render_as_string(hide_password=False)
    env[LEDGER_URL_ENV] = direct.render_as_string(hide_password=False)  # never blackholed
    return env


def _proxies(url: URL) -> list[BlackholeProxy]:
    """One proxy per TCP server of ``url`` (none for a unix socket)."""
    hosts = url.query.get("host", ())
    hosts = (hosts,) if isinstance(hosts, str) else hosts
    if not hosts and url.host:
        hosts = (f"{url.host}:{url.port or 5432}",)
    found = []
    for host in hosts:
        if str(host).startswith("/"):
            return []
        name, _, port = str(host).rpartition(":") if ":" in str(host) else (host, "", "5432")
        found.append(BlackholeProxy((name, int(port))))
    return found


def _through(url: URL, proxies: list[BlackholeProxy]) -> URL:
    """``url`` with its servers replaced by the proxies in front of them."""
    if not proxies:
        return url
    hosts = tuple(f"127.0.0.1:{proxy.port}" for proxy in proxies)
    query = {k: v for k, v in url.query.items() if k != "host"}
    return URL.create(
        url.drivername,
        url.username,
        url.password,
        None,
        None,
        url.database,
        {**query, "host": hosts},
    )


def _run(
    options: Options, schedule: list[Fault], servers: Servers, url: URL, workdir: Path
) -> Result:
    started = time.monotonic()
    os.environ[settings.URL_ENV] = url.render_as_string(hide_password=False)
    from . import app

    proxies = _proxies(url)
    fleet = Fleet(_env(_through(url, proxies), url), workdir, options.supervisors)
    injector = Injector(
        fleet, db.connect_kwargs(url), servers, DRAIN_WAIT, _clock_offset(url), proxies=proxies
    )
    producers = Producers(
        app.pool,
        options.seed,
        options.rate,
        threads=3,
        poison_every=min(30.0, max(10.0, options.duration / 4)),
    )
    try:
        fleet.fill()
        _wait_booted(fleet, expected=EXPECTED_CHILDREN)
        producers.start()
        _play(schedule, injector, started=time.monotonic(), duration=options.duration)
        producers.stop()
        injector.continue_stopped(everything=True)
        fleet.fill()
        phases = {"workload": time.monotonic() - started}
        _settle(url, options.settle_timeout)
        phases["settle"] = time.monotonic() - started
        injector.wait_drains()
        fleet.stop_all(DRAIN_WAIT)
        _wait_orphans(fleet)
        phases["stopped"] = time.monotonic() - started
        history = read_history(url, producers.records(), producers.result_reads())
    finally:
        injector.continue_stopped(everything=True)
        fleet.kill_everything()
        app.pool.dispose()
        for proxy in proxies:
            proxy.close()
    verdict = judge(history, fleet)
    for shape, count in producers.workflows.items():
        verdict.notes[f"workflow enqueue {shape}"] = count
    landed = [(item.fault.seq, item.fault.kind, item.at) for item in injector.landed]
    completions = [
        (run["started_at"].timestamp(), run["finished_at"].timestamp())
        for run in history.execs
        if run["outcome"] == "ok" and run["finished_at"] is not None
    ]
    return Result(
        schedule,
        injector,
        verdict,
        recovery_times(landed, completions),
        fleet,
        time.monotonic() - started,
        db.redact(url),
        phases,
    )


def judge(history: History, fleet: Fleet) -> Verdict:
    """The checker's verdict on the history, plus what only the processes can tell."""
    verdict = check(history)
    for pgid, alive in fleet.orphans():
        verdict.add("orphan_process", {"supervisor": pgid, "alive": alive})
    for pid, code, how in fleet.exit_codes:
        if how == "SIGTERM" and code != 0:
            verdict.add("drain_exit", {"supervisor": pid, "exit": code})
        elif how == "SIGTERM early":  # before its handlers: the default action, nothing forked
            verdict.notes["SIGTERM before a supervisor was up (killed by it, nothing lost)"] += 1
    # a failover's lost commit replies: the poison bound depends on their rows being given back
    unheld = fleet.count_in_logs(UNHELD_RETURNED)
    if unheld:
        verdict.notes["claims committed unseen, given back before the next claim"] = unheld
    return verdict


def _wait_booted(fleet: Fleet, expected: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = fleet.live()
        if live and all(len(m.children()) >= expected for m in live):
            return
        time.sleep(0.1)
    raise RuntimeError(
        f"supervisors did not start their children within {timeout:g}s; see {fleet.workdir}"
    )


def _play(schedule: list[Fault], injector: Injector, started: float, duration: float) -> None:
    for fault in schedule:
        while (wait := started + fault.at - time.monotonic()) > 0:
            injector.continue_stopped()
            time.sleep(min(wait, 0.05))
        log.info("fault %s", fault.describe())
        injector.inject(fault)
        injector.fleet.fill()
    while time.monotonic() < started + duration:
        injector.continue_stopped()
        time.sleep(0.05)


UNFINISHED = """
SELECT count(*) FROM workerpool_jobs WHERE state NOT IN ('done', 'dead', 'cancelled')
  AND NOT (task = 'tick' AND state = 'pending' AND run_at > now())
"""


def _settle(url: URL, timeout: float) -> None:
    """Wait until every job is terminal (the last cron tick may still be due), for as long as
    the work keeps moving: the drain gives up only after ``timeout`` seconds with no job
    finished (suspects of child deaths run one at a time, so a backlog of them takes a while)."""
    deadline, left = time.monotonic() + timeout, None
    hard_stop = time.monotonic() + SETTLE_CAP * timeout
    while time.monotonic() < min(deadline, hard_stop):
        with contextlib.suppress(psycopg.OperationalError):
            with psycopg.connect(autocommit=True, **db.connect_kwargs(url)) as conn:
                row = conn.execute(UNFINISHED).fetchone()
            count = row[0] if row is not None else None
            if count == 0:
                return
            if left is None or (count is not None and count < left):
                deadline, left = time.monotonic() + timeout, count  # progress: wait on
        time.sleep(0.5)
    log.warning(
        "%s jobs still unfinished after the workload ended (no progress for %gs)", left, timeout
    )


def _wait_orphans(fleet: Fleet) -> None:
    from .fleet import ORPHAN_WAIT

    for pgid, when in fleet.gone:
        while group_members(pgid) and time.monotonic() - when <= ORPHAN_WAIT:
            time.sleep(0.2)


def read_history(
    url: URL, enqueued: list[dict[str, Any]], reads: list[dict[str, Any]] | None = None
) -> History:
    with psycopg.connect(
        autocommit=True, row_factory=psycopg.rows.dict_row, **db.connect_kwargs(url)
    ) as conn:
        # both tables: the maintenance child moves finished jobs to the history during the run
        jobs = {
            row["id"]: row
            for row in conn.execute(
                "SELECT * FROM "
                + sql_history.union(
                    "id, key, task, state, dead_reason, attempts, max_attempts, crashes, errors,"
                    " payload, result, batch_id, finished_at, sequence, steps",
                    "true",
                )
                + " AS jobs"
            )
        }
        batches = {
            row["id"]: row
            for row in conn.execute(
                "SELECT id, key, finished_at, outcome, fired_by, callback_ids"
                " FROM workerpool_batches"
            )
        }
        callbacks = list(conn.execute("SELECT * FROM chaos_callback"))
        execs = list(conn.execute("SELECT * FROM chaos_exec ORDER BY started_at"))
        probes: dict[str, list] = {}
        for row in conn.execute("SELECT exec_id, at, valid FROM chaos_probe"):
            probes.setdefault(row["exec_id"], []).append((row["at"], row["valid"]))
        effects = {row["key"]: row for row in conn.execute("SELECT * FROM chaos_effect")}
        edges = list(conn.execute("SELECT * FROM workerpool_job_dependencies"))
        step_runs = list(conn.execute("SELECT * FROM chaos_step ORDER BY at"))
        once = {
            row["job_id"]: row["count"]
            for row in conn.execute("SELECT job_id, count(*) FROM chaos_once GROUP BY job_id")
        }
    return History(
        enqueued,
        jobs,
        execs,
        probes,
        effects,
        batches,
        callbacks,
        reads or [],
        edges,
        step_runs,
        once,
    )


__all__ = ["FAILOVER", "Options", "Result", "run"]
