"""The supervisor's state machine on a fake OS: no processes, no sleeps, a clock we move.

``FakeOS`` records kills and spawns, and returns the exits and pipe reports a test scripts
(supervisord's ``DummyOptions`` style). Each test is named after one edge of the state machine.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from workerpool.model import exitcodes
from workerpool.model.states import ChildState
from workerpool.process.settings import RunSettings, WorkerType
from workerpool.process.supervisor import Supervisor


def exited(code: int) -> int:
    return code << 8  # a waitpid status for a normal exit


def killed_by(signum: int) -> int:
    return signum


@dataclass
class FakeChild:
    worker: WorkerType
    orphans: tuple[str, ...]
    parent_pid: int
    close_fds: tuple[int, ...]

    def start(self, tick_fd: int) -> int:  # pragma: no cover - never forked here
        raise AssertionError("FakeOS does not fork")


@dataclass
class FakeReleaser:
    worker_ids: tuple[str, ...]
    parent_pid: int
    close_fds: tuple[int, ...]

    def start(self, report_fd: int) -> int:  # pragma: no cover - never forked here
        raise AssertionError("FakeOS does not fork")


@dataclass
class FakeOS:
    clock: float = 1000.0
    next_pid: int = 100
    kills: list[tuple[int, int]] = field(default_factory=list)
    spawned: list[tuple[int, FakeChild]] = field(default_factory=list)
    exits: list[tuple[int, int]] = field(default_factory=list)
    pipes: dict[int, bytes] = field(default_factory=dict)
    touched: list[tuple[str, float]] = field(default_factory=list)
    closed: list[int] = field(default_factory=list)

    def monotonic(self) -> float:
        return self.clock

    def getpid(self) -> int:
        return 1

    def install_signals(self, handler) -> None:
        pass

    def restore_signals(self) -> None:
        pass

    def own_fds(self) -> list[int]:
        return [3, 4]

    def spawn(self, target) -> tuple[int, int]:
        pid = self.next_pid
        self.next_pid += 1
        self.spawned.append((pid, target.__self__))
        return pid, pid + 10_000  # the fd of a pid is pid + 10000

    def kill(self, pid: int, signum: int) -> None:
        self.kills.append((pid, signum))

    def reap(self) -> list[tuple[int, int]]:
        done, self.exits = self.exits, []
        return done

    def wait(self, fds: list[int], timeout: float) -> list[int]:
        return [fd for fd in fds if fd in self.pipes]

    def read(self, fd: int) -> bytes | None:
        return self.pipes.pop(fd, None)

    def close(self, fd: int) -> None:
        self.closed.append(fd)

    def touch(self, path: Path) -> None:
        self.touched.append((Path(path).name, self.clock))

    # -- scripting -----------------------------------------------------------------------------

    def report(self, pid: int, text: str) -> None:
        self.pipes[pid + 10_000] = self.pipes.get(pid + 10_000, b"") + text.encode()

    def pids_of(self, name: str) -> list[int]:
        return [
            pid
            for pid, child in self.spawned
            if isinstance(child, FakeChild) and child.worker.name == name
        ]

    def releasers(self) -> list[tuple[int, FakeReleaser]]:
        return [(pid, child) for pid, child in self.spawned if isinstance(child, FakeReleaser)]

    def signals_to(self, pid: int) -> list[int]:
        return [sig for p, sig in self.kills if p == pid]


def worker(name: str, drain: float = 5.0, hang: float = 10.0) -> WorkerType:
    return WorkerType(name, "queue", drain, hang)


@pytest.fixture
def fake() -> FakeOS:
    return FakeOS()


def make(fake: FakeOS, tmp_path: Path, *workers: WorkerType, **options) -> Supervisor:
    settings = RunSettings(
        workers=workers or (worker("email"), worker("sms")), heartbeat_dir=tmp_path, **options
    )
    sup = Supervisor(
        settings, os_layer=fake, child_factory=FakeChild, releaser_factory=FakeReleaser
    )
    sup.start()
    assert sup.step() is None  # spawns everything
    return sup


def tick(fake: FakeOS, sup: Supervisor, pid: int, worker_id: str | None = None) -> None:
    fake.report(pid, (f"w {worker_id}\n" if worker_id else "") + "t\n")
    assert sup.step() is None


def slot(sup: Supervisor, name: str):
    return next(s for s in sup.slots if s.name == name)


def test_one_child_per_worker_type_with_the_parents_fds_to_close(fake, tmp_path):
    sup = make(fake, tmp_path)
    assert [child.worker.name for _, child in fake.spawned] == ["email", "sms"]
    email, sms = (child for _, child in fake.spawned)
    lock = sup._claim.fd  # the heartbeat directory's: a child must not hold it
    assert set(email.close_fds) == {3, 4, lock} and email.parent_pid == 1
    assert set(sms.close_fds) == {3, 4, lock, 10_100}  # the email child's pipe stays the parent's


def test_term_forwards_sigterm_once_and_exits_0_when_children_are_gone(fake, tmp_path):
    sup = make(fake, tmp_path)
    email, sms = fake.pids_of("email")[0], fake.pids_of("sms")[0]
    sup.on_signal(signal.SIGTERM)
    sup.on_signal(signal.SIGTERM)  # from the process group too: still one drain
    assert sup.step() is None
    sup.on_signal(signal.SIGTERM)
    assert sup.step() is None
    assert fake.signals_to(email) == [signal.SIGTERM] and fake.signals_to(sms) == [signal.SIGTERM]
    fake.exits = [(email, exited(0))]
    assert sup.step() is None
    fake.exits = [(sms, exited(0))]
    assert sup.step() == exitcodes.OK
    assert len(fake.spawned) == 2  # nothing restarted during the drain


def test_drain_deadline_sends_sigkill(fake, tmp_path):
    sup = make(fake, tmp_path, worker("email", drain=5.0), drain_margin=2.0)
    pid = fake.pids_of("email")[0]
    sup.on_signal(signal.SIGTERM)
    sup.step()
    fake.clock += 6.9
    sup.step()
    assert fake.signals_to(pid) == [signal.SIGTERM]
    fake.clock += 0.2  # past drain + margin
    sup.step()
    assert fake.signals_to(pid) == [signal.SIGTERM, signal.SIGKILL]
    sup.step()
    assert fake.signals_to(pid).count(signal.SIGKILL) == 1  # escalate once
    fake.exits = [(pid, killed_by(signal.SIGKILL))]
    assert sup.step() == exitcodes.OK


def test_second_int_stops_at_once(fake, tmp_path):
    sup = make(fake, tmp_path, worker("email", drain=60.0))
    pid = fake.pids_of("email")[0]
    sup.on_signal(signal.SIGINT)
    sup.step()
    sup.on_signal(signal.SIGINT)
    sup.step()
    assert fake.signals_to(pid) == [signal.SIGTERM, signal.SIGQUIT]
    fake.clock += sup.settings.drain_margin + 0.1  # not the 60 s drain: the margin only
    sup.step()
    assert fake.signals_to(pid)[-1] == signal.SIGKILL


def test_quit_stops_at_once(fake, tmp_path):
    sup = make(fake, tmp_path)
    sup.on_signal(signal.SIGQUIT)
    sup.step()
    assert {sig for _, sig in fake.kills} == {signal.SIGQUIT}


def test_crashed_child_restarts_at_once_and_its_worker_id_goes_to_the_replacement(fake, tmp_path):
    sup = make(fake, tmp_path)
    first = fake.pids_of("email")[0]
    tick(fake, sup, first, worker_id="host:100:aa")
    fake.clock += 30  # it ran long enough to count as stable
    fake.exits = [(first, killed_by(signal.SIGKILL))]
    sup.step()
    replacement = fake.spawned[-1][1]
    assert replacement.worker.name == "email" and replacement.orphans == ("host:100:aa",)
    assert slot(sup, "email").state is ChildState.STARTING


def test_orphans_stay_pending_until_a_replacement_has_ticked(fake, tmp_path):
    sup = make(fake, tmp_path)
    first = fake.pids_of("email")[0]
    tick(fake, sup, first, worker_id="w1")
    fake.exits = [(first, killed_by(signal.SIGKILL))]
    sup.step()
    second = fake.pids_of("email")[1]
    fake.report(second, "w w2\n")  # dies before its first pass: w1 not released yet
    fake.exits = [(second, exited(1))]
    sup.step()
    fake.clock += 10
    sup.step()
    assert fake.spawned[-1][1].orphans == ("w1", "w2")
    tick(fake, sup, fake.pids_of("email")[2], worker_id="w3")
    assert slot(sup, "email").given == () and slot(sup, "email").orphans == []


def test_boot_failed_child_backs_off_then_fatal(fake, tmp_path):
    sup = make(fake, tmp_path, worker("email"), worker("sms"), restart_delay=1.0, boot_retries=4)
    sms = fake.pids_of("sms")[0]
    tick(fake, sup, sms)
    gaps = []
    for attempt in range(4):
        pid = fake.pids_of("email")[-1]
        fake.exits = [(pid, exited(3))]
        died = fake.clock
        sup.step()
        if attempt == 3:
            break
        if slot(sup, "email").state is ChildState.BACKOFF:
            fake.clock = slot(sup, "email").restart_at - 0.01
            sup.step()
            assert len(fake.pids_of("email")) == attempt + 1  # not yet
            fake.clock += 0.01
            sup.step()
        assert len(fake.pids_of("email")) == attempt + 2
        gaps.append(round(slot(sup, "email").started - died, 6))
    assert gaps == [0.0, 1.0, 2.0]
    assert slot(sup, "email").state is ChildState.FATAL
    assert fake.signals_to(sms) == [signal.SIGTERM]  # the others drain
    fake.exits = [(sms, exited(0))]
    assert sup.step() == exitcodes.BOOT_FAILED


def test_a_child_that_ran_then_keeps_crashing_fast_backs_off_without_going_fatal(fake, tmp_path):
    sup = make(fake, tmp_path, worker("email"), restart_delay=1.0, boot_retries=2)
    delays = []
    for _ in range(5):
        pid = fake.pids_of("email")[-1]
        tick(fake, sup, pid)
        fake.exits = [(pid, exited(1))]
        sup.step()
        delays.append(slot(sup, "email").restart_at - fake.clock)
        fake.clock = slot(sup, "email").restart_at
        sup.step()
    assert delays == [0.0, 1.0, 2.0, 4.0, 8.0]
    assert slot(sup, "email").state is ChildState.STARTING


def test_a_child_that_dies_holding_jobs_is_replaced_at_once_every_time(fake, tmp_path):
    """Its jobs are suspects now (run alone), so an immediate restart cannot loop on them;
    back-off is for children that make no progress."""
    sup = make(fake, tmp_path, worker("email"), restart_delay=1.0, boot_retries=2)
    for round_ in range(6):
        pid = fake.pids_of("email")[-1]
        fake.report(pid, f"w w-{round_}\nj\n")  # claimed, then died before its first tick
        fake.exits = [(pid, killed_by(signal.SIGKILL))]
        sup.step()
        assert slot(sup, "email").restart_at == fake.clock  # no delay, no boot failure
        sup.step()
        assert len(fake.pids_of("email")) == round_ + 2
    assert slot(sup, "email").state is ChildState.STARTING
    assert slot(sup, "email").orphans == [] and len(slot(sup, "email").given) == 6


def test_stale_heartbeat_gets_a_stack_dump_then_sigkill(fake, tmp_path):
    sup = make(fake, tmp_path, worker("email", hang=10.0))
    pid = fake.pids_of("email")[0]
    tick(fake, sup, pid)
    fake.clock += 9.9
    sup.step()
    assert fake.signals_to(pid) == []
    fake.clock += 0.2
    sup.step()
    assert fake.signals_to(pid) == [signal.SIGUSR2]
    fake.clock += 0.5
    sup.step()
    assert fake.signals_to(pid) == [signal.SIGUSR2, signal.SIGKILL]
    fake.exits = [(pid, killed_by(signal.SIGKILL))]
    sup.step()
    assert len(fake.pids_of("email")) == 2


def test_child_that_never_ticks_is_killed_after_hang_timeout(fake, tmp_path):
    sup = make(fake, tmp_path, worker("email", hang=10.0))
    pid = fake.pids_of("email")[0]
    fake.clock += 10.1
    sup.step()
    assert fake.signals_to(pid) == [signal.SIGUSR2]


def test_unknown_pid_is_reaped_not_respawned(fake, tmp_path):
    sup = make(fake, tmp_path)
    fake.exits = [(4242, exited(0))]  # an orphan re-parented to us (we may be PID 1)
    sup.step()
    assert len(fake.spawned) == 2 and not fake.kills
    assert all(s.state is ChildState.STARTING for s in sup.slots)


def test_heartbeat_files_are_touched_on_ticks_at_most_once_a_second(fake, tmp_path):
    sup = make(fake, tmp_path)
    pid = fake.pids_of("email")[0]
    fake.touched.clear()
    for _ in range(5):
        tick(fake, sup, pid)
        fake.clock += 0.3
    touches = [at for name, at in fake.touched if name == "email.heartbeat"]
    assert len(touches) == 2 and touches[1] - touches[0] >= 1.0
    assert not [n for n, _ in fake.touched if n == "sms.heartbeat"]  # sms never ticked
    assert [n for n, _ in fake.touched if n == "supervisor.heartbeat"]


def test_a_split_report_is_reassembled(fake, tmp_path):
    sup = make(fake, tmp_path)
    pid = fake.pids_of("email")[0]
    fake.report(pid, "w host:1")
    sup.step()
    fake.report(pid, "00:ab\nt\n")
    sup.step()
    assert slot(sup, "email").worker_id == "host:100:ab"
    assert slot(sup, "email").state is ChildState.RUNNING


def test_end_of_pipe_closes_the_fd_and_the_reap_decides(fake, tmp_path):
    sup = make(fake, tmp_path)
    pid = fake.pids_of("email")[0]
    fake.pipes[pid + 10_000] = b""
    sup.step()
    assert pid + 10_000 in fake.closed and slot(sup, "email").fd is None
    assert slot(sup, "email").state is ChildState.STARTING  # still alive until reaped


# -- the maintenance child's loop (in-process, with a stand-in Maintenance) ------------------


class StandInMaintenance:
    interval = 0.01

    def __init__(self, pool, *, worker_id: str) -> None:
        self.worker_id = worker_id
        self.passes = 0

    def run_pass(self) -> None:
        self.passes += 1

    def close(self) -> None:
        self.closed = True


def test_maintenance_loop_ticks_after_each_pass_and_stops():
    import threading

    from tests.helpers.waiting import wait_until
    from workerpool.runtime.maintenance import MaintenanceLoop

    ticks: list[int] = []
    loop = MaintenanceLoop(
        StandInMaintenance(None, worker_id="w"),
        on_tick=lambda: ticks.append(1),
        parent_alive=lambda: True,
    )
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(loop.run()))
    thread.start()
    wait_until(lambda: len(ticks) >= 3, 5, message="three passes")
    loop.stop()
    thread.join(5)
    assert result == [0] and loop.maintenance.passes >= len(ticks) >= 3
    assert loop.maintenance.closed  # left the workers registry on a clean stop

    orphaned = MaintenanceLoop(
        StandInMaintenance(None, worker_id="w"), on_tick=lambda: None, parent_alive=lambda: False
    )
    assert orphaned.run() == 0 and orphaned.maintenance.passes == 1  # parent gone: stops


def test_maintenance_worker_type_outlives_every_queue_timing(tmp_path):
    from workerpool import WorkerPool
    from workerpool.process import settings as config

    pool = WorkerPool("postgresql://nobody@127.0.0.1:1/none")
    pool.queue("email", drain_timeout=7, hang_timeout=90)
    settings = config.load(pool, heartbeat_dir=tmp_path / "hb", maintenance_interval=1.0)
    maintenance = settings.workers[-1]
    assert (maintenance.name, maintenance.kind) == ("@maintenance", "maintenance")
    assert maintenance.hang_timeout == 90 and maintenance.drain_timeout == 7


def test_drain_timeout_from_the_environment_overrides_every_queue(tmp_path, monkeypatch):
    import dataclasses

    from workerpool import WorkerPool
    from workerpool.process import settings as config

    pool = WorkerPool("postgresql://nobody@127.0.0.1:1/none")
    pool.queue("email", drain_timeout=7)
    pool.queue("sms", drain_timeout=3)
    monkeypatch.setenv("WORKERPOOL_DRAIN_TIMEOUT", "4.5")
    settings = config.load(pool, heartbeat_dir=tmp_path / "hb")
    assert [w.drain_timeout for w in settings.workers] == [4.5, 4.5]
    # what each child's Worker runs with: the queue as declared, the override applied
    assert [w.spec for w in settings.workers] == [
        dataclasses.replace(pool.queues[name], drain_timeout=4.5) for name in ("email", "sms")
    ]
    assert pool.queues["email"].drain_timeout == 7  # the pool is left as declared


def test_a_queue_named_maintenance_does_not_collide_with_the_maintenance_child(tmp_path):
    from workerpool import WorkerPool
    from workerpool.process import settings as config

    pool = WorkerPool("postgresql://nobody@127.0.0.1:1/none")
    pool.queue("maintenance")  # DESIGN §6's own cron example uses this queue name
    settings = config.load(pool, heartbeat_dir=tmp_path / "hb", maintenance_interval=1.0)
    assert [(w.name, w.kind) for w in settings.workers] == [
        ("maintenance", "queue"),
        ("@maintenance", "maintenance"),
    ]


# -- the releaser at exit ---------------------------------------------------------------------


def test_claims_of_children_dead_in_shutdown_go_to_one_releaser_killed_at_its_deadline(
    fake, tmp_path, caplog
):
    sup = make(
        fake,
        tmp_path,
        worker("email", drain=5.0),
        worker("sms", drain=5.0),
        drain_margin=2.0,
        release_margin=3.0,
    )
    email, sms = fake.pids_of("email")[0], fake.pids_of("sms")[0]
    tick(fake, sup, email, worker_id="e1")
    tick(fake, sup, sms, worker_id="s1")
    fake.exits = [(sms, killed_by(signal.SIGKILL))]  # crashed while running: s1 orphaned
    sup.step()
    sms2 = fake.pids_of("sms")[1]
    fake.report(sms2, "w s2\n")  # the replacement has not released s1 yet (no tick)
    sup.step()
    sup.on_signal(signal.SIGTERM)
    sup.step()
    fake.exits = [(sms2, exited(0))]  # drained cleanly: s2 released itself, s1 still untaken
    sup.step()
    fake.clock += 7.1  # email cannot drain: SIGKILL at drain + margin
    assert sup.step() is None
    assert fake.signals_to(email)[-1] == signal.SIGKILL and not fake.releasers()
    fake.exits = [(email, killed_by(signal.SIGKILL))]
    assert sup.step() is None  # every child gone: the releaser is forked, the parent waits
    [(releaser_pid, releaser)] = fake.releasers()
    assert releaser.worker_ids == ("e1", "s1") and releaser.parent_pid == 1
    assert {3, 4} <= set(releaser.close_fds)
    fake.clock += 2.9
    assert sup.step() is None  # still inside its margin
    assert fake.signals_to(releaser_pid) == []
    fake.clock += 0.2
    assert sup.step() == exitcodes.OK  # past it: SIGKILL and exit without waiting for the reap
    assert fake.signals_to(releaser_pid) == [signal.SIGKILL]
    assert len(fake.releasers()) == 1
    assert [r.message for r in caplog.records if getattr(r, "event", "") == "release_failed"]


def test_a_releaser_that_reports_and_exits_lets_the_parent_exit_at_once(fake, tmp_path, caplog):
    caplog.set_level("INFO", logger="workerpool.supervisor")
    sup = make(fake, tmp_path, worker("email"), worker("sms"))
    email, sms = fake.pids_of("email")[0], fake.pids_of("sms")[0]
    tick(fake, sup, email, worker_id="e1")
    tick(fake, sup, sms, worker_id="s1")
    sup.on_signal(signal.SIGTERM)
    sup.step()
    fake.exits = [(email, exited(1)), (sms, exited(0))]  # email crashed mid-drain
    assert sup.step() is None
    [(releaser_pid, releaser)] = fake.releasers()
    assert releaser.worker_ids == ("e1",)  # sms drained: its own claims are already released
    fake.report(releaser_pid, "r 2\n")
    fake.exits = [(releaser_pid, exited(0))]
    assert sup.step() == exitcodes.OK
    assert fake.signals_to(releaser_pid) == []
    [released] = [
        r for r in caplog.records if getattr(r, "event", "") == "orphans_released_at_exit"
    ]
    assert released.count == 2


def test_a_clean_drain_forks_no_releaser(fake, tmp_path):
    sup = make(fake, tmp_path)
    email, sms = fake.pids_of("email")[0], fake.pids_of("sms")[0]
    tick(fake, sup, email, worker_id="e1")
    tick(fake, sup, sms, worker_id="s1")
    sup.on_signal(signal.SIGTERM)
    sup.step()
    fake.exits = [(email, exited(0)), (sms, exited(0))]
    assert sup.step() == exitcodes.OK
    assert fake.releasers() == []


def test_the_grace_period_must_cover_drain_plus_both_margins(tmp_path):
    from workerpool import WorkerPool
    from workerpool.model.errors import ConfigError
    from workerpool.process import settings as config

    pool = WorkerPool("postgresql://nobody@127.0.0.1:1/none")
    pool.queue("email", drain_timeout=26)
    settings = config.load(pool, heartbeat_dir=tmp_path / "hb", grace=31.5)  # 26 + 2 + 3 < 31.5
    assert settings.shutdown_budget == 26 + config.DRAIN_MARGIN + config.RELEASE_MARGIN == 31
    with pytest.raises(
        ConfigError,
        match=r"plus the 5s shutdown margin is not below the "
        r"orchestrator grace period \(30s\)",
    ):
        config.load(pool, heartbeat_dir=tmp_path / "hb", grace=30)  # 26 + 2 < 30 fit before
