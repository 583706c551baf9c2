"""Two supervisors of one app on one database started at once (two Django workers on a host,
say) both see the first default heartbeat directory free; the one that claims it second takes
the next sibling instead of stopping on HeartbeatDirBusy. A directory given is never swapped."""

from __future__ import annotations

import pytest

from workerpool.model.errors import ConfigError
from workerpool.process import heartbeat
from workerpool.process.settings import RunSettings, WorkerType, heartbeat_base
from workerpool.process.supervisor import Supervisor

APP, DATABASE = "workerpool.contrib.django.worker:pool", "postgresql://db/shop"


def unused(*args, **kwargs):
    raise AssertionError("nothing is forked here")


def supervisor(directory) -> Supervisor:
    settings = RunSettings(
        workers=(WorkerType("default", "default", 5.0, 10.0),),
        heartbeat_dir=directory,
        app=APP,
        database=DATABASE,
    )
    return Supervisor(settings, child_factory=unused, releaser_factory=unused)


@pytest.fixture
def defaults(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    base = heartbeat_base()
    base.mkdir(mode=0o700)
    return heartbeat.default_dirs(base, APP, DATABASE)


def test_the_second_claim_of_a_default_directory_takes_its_sibling(defaults):
    first = heartbeat.claim(defaults[0], APP, DATABASE)  # the supervisor that won the race
    try:
        late = supervisor(defaults[0])  # it chose the first one too, when it was still free
        late._claim_heartbeat_dir()
        assert late.settings.heartbeat_dir == defaults[1]
        assert heartbeat.held(defaults[1])
        late._claim.close()
    finally:
        first.close()


def test_a_given_directory_held_by_another_supervisor_is_refused(tmp_path, defaults):
    given = tmp_path / "given"
    given.mkdir(mode=0o700)
    other = heartbeat.claim(given, APP, DATABASE)
    try:
        with pytest.raises(ConfigError, match="in use by a live supervisor"):
            supervisor(given)._claim_heartbeat_dir()
    finally:
        other.close()
