"""Several children per queue: ``processes=`` and ``--processes QUEUE=N``, checked before any
fork, and the names each child goes by (heartbeat file, logs, metrics)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from workerpool import WorkerPool
from workerpool.model.errors import ConfigError
from workerpool.process import healthcheck, heartbeat, oslayer
from workerpool.process import settings as config


def pool_with(**queues: dict) -> WorkerPool:
    pool = WorkerPool("postgresql://nobody@127.0.0.1:1/none")
    for name, options in queues.items():
        pool.queue(name, **options)
    return pool


@pytest.mark.parametrize("value", [0, -1, 257, 1.5, True, "2", "AUTO", None, [2]])
def test_a_bad_processes_is_refused_by_name(value):
    pool = pool_with()
    with pytest.raises(
        ConfigError,
        match=r"queue render: processes must be an int within "
        r"1\.\.256 or 'auto'",
    ):
        pool.queue("render", processes=value)
    assert "render" not in pool.queues  # nothing declared


def test_the_default_is_one_child_named_after_its_queue(tmp_path):
    settings = config.load(pool_with(email={}), heartbeat_dir=tmp_path / "hb")
    assert [(w.name, w.queue) for w in settings.workers] == [("email", "email")]


def test_processes_forks_that_many_children_each_named_and_serving_its_queue(tmp_path):
    pool = pool_with(render={"processes": 3}, email={})
    settings = config.load(pool, heartbeat_dir=tmp_path / "hb", maintenance_interval=1.0)
    assert [(w.name, w.queue, w.kind) for w in settings.workers] == [
        ("render.0", "render", "queue"),
        ("render.1", "render", "queue"),
        ("render.2", "render", "queue"),
        ("email", "email", "queue"),
        ("@maintenance", "@maintenance", "maintenance"),
    ]
    assert all(w.spec == pool.queues["render"] for w in settings.workers[:3])


def test_auto_is_one_child_per_core(tmp_path):
    pool = pool_with(render={"processes": "auto"})
    settings = config.load(pool, heartbeat_dir=tmp_path / "hb", cpu_count=4)
    assert [w.name for w in settings.workers] == ["render.0", "render.1", "render.2", "render.3"]
    one_core = config.load(pool, heartbeat_dir=tmp_path / "hb", cpu_count=1)
    assert [w.name for w in one_core.workers] == ["render"]
    here = config.load(pool, heartbeat_dir=tmp_path / "hb")  # this host's usable cores
    assert len(here.workers) == oslayer.usable_cpus()


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({}, 8),  # no cgroup files: the affinity
        ({"cpu.max": "max 100000\n"}, 8),  # v2, no limit
        ({"cpu.max": "200000 100000\n"}, 2),  # v2, a 2-CPU limit
        ({"cpu.max": "150000 100000\n"}, 2),  # 1.5 CPUs: rounded up
        ({"cpu.max": "50000 100000\n"}, 1),
        ({"cpu.max": "1600000 100000\n"}, 8),  # a limit above the cores: the cores
        ({"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 3),  # v1
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, 8),
        ({"cpu.max": "garbage\n"}, 8),
    ],
)
def test_auto_counts_the_cores_a_container_may_use(tmp_path, monkeypatch, files, expected):
    monkeypatch.setattr(oslayer.os, "sched_getaffinity", lambda pid: set(range(8)))
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert oslayer.usable_cpus(tmp_path) == expected


def test_the_command_line_replaces_the_declared_processes(tmp_path):
    pool = pool_with(render={"processes": 4}, email={})
    settings = config.load(
        pool, heartbeat_dir=tmp_path / "hb", cpu_count=2, processes=["render=2", "email=auto"]
    )
    assert [w.name for w in settings.workers] == ["render.0", "render.1", "email.0", "email.1"]
    assert settings.queues["render"].processes == 2
    assert pool.queues["render"].processes == 4  # the pool is left as declared


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (["render"], "--processes takes QUEUE=N"),
        (["render="], "--processes takes QUEUE=N"),
        (["=2"], "--processes takes QUEUE=N"),
        (["render=two"], "--processes render: N must be an int or 'auto', got 'two'"),
        (["render=0"], "--processes render must be an int within 1..256 or 'auto', got 0"),
        (["render=1000"], "--processes render must be an int within 1..256"),
        (["nope=2"], "--processes nope=2: this run serves no queue 'nope'"),
    ],
)
def test_bad_processes_arguments_are_refused_in_one_line(tmp_path, given, message):
    with pytest.raises(ConfigError) as refused:
        config.load(pool_with(render={}), heartbeat_dir=tmp_path / "hb", processes=given)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_a_queue_named_like_anothers_child_is_refused(tmp_path):
    pool = pool_with(render={"processes": 2}, **{"render.1": {}})
    with pytest.raises(ConfigError, match=r"child name 'render.1' is taken twice"):
        config.load(pool, heartbeat_dir=tmp_path / "hb")
    # one child each: no clash
    assert (
        len(config.load(pool, heartbeat_dir=tmp_path / "hb", processes=["render=1"]).workers) == 2
    )


@pytest.mark.slow  # the CLI as a subprocess
def test_workerpool_run_refuses_bad_processes_in_one_line_before_anything(tmp_path):
    app = tmp_path / "procs_app.py"
    app.write_text(
        "from workerpool import WorkerPool\n"
        "pool = WorkerPool('postgresql://nobody@127.0.0.1:1/none')\n"
        "pool.queue('render')\n"
    )
    hb = tmp_path / "hb"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "workerpool",
            "run",
            "procs_app:pool",
            "--heartbeat-dir",
            str(hb),
            "--processes",
            "render=many",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)},
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "workerpool run: --processes render: N must be an int or 'auto', got 'many'"
    ]
    assert not hb.exists()  # refused before the heartbeat directory was made


def test_healthcheck_asked_for_a_queue_judges_each_of_its_children(tmp_path):
    for name in ("render.0", "render.1", "email", "renders.0"):
        heartbeat.touch(heartbeat.path_for(tmp_path, name), now=1000.0)
    heartbeat.touch(heartbeat.path_for(tmp_path, "render.1"), now=900.0)
    verdict = healthcheck.check(tmp_path, 60, ["render"], now=1010.0)
    assert not verdict.healthy and verdict.message.startswith("render.1: heartbeat is 110.0s")
    heartbeat.touch(heartbeat.path_for(tmp_path, "render.1"), now=1000.0)
    verdict = healthcheck.check(tmp_path, 60, ["render", "email"], now=1010.0)
    assert verdict.healthy
    assert verdict.message == "ok: email 10.0s, render.0 10.0s, render.1 10.0s"
    assert not healthcheck.check(tmp_path, 60, ["sms"], now=1010.0).healthy
