"""deploy/kubernetes/ agrees with the code: shutdown budget, probes, heartbeat volume, migrations.

The manifests are parsed (PyYAML), never applied: these checks are the arithmetic and the wiring a
reviewer would do by hand, made to fail when a default in the code moves.
"""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath
from typing import Any

import pytest
import yaml

from tests.helpers.paths import ROOT
from workerpool.cli import build_parser
from workerpool.model.specs import QueueSpec
from workerpool.process.heartbeat import HEARTBEAT_PERIOD
from workerpool.process.settings import GRACE_ENV, SHUTDOWN_MARGIN
from workerpool.process.settings import HEARTBEAT_DIR_ENV as DIR_ENV

MANIFESTS = ROOT / "deploy" / "kubernetes"

DEFAULTS = QueueSpec(name="defaults")


def documents() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        docs.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return docs


def one(kind: str) -> dict[str, Any]:
    found = [doc for doc in documents() if doc["kind"] == kind]
    assert len(found) == 1, f"expected one {kind} in {MANIFESTS}, found {len(found)}"
    return found[0]


def container(workload: dict[str, Any]) -> dict[str, Any]:
    containers = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def env_of(spec: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item for item in spec.get("env", [])}


def env_value(spec: dict[str, Any], name: str) -> str | None:
    item = env_of(spec).get(name)
    return None if item is None else item.get("value")


def option(argv: list[str], name: str) -> str:
    assert name in argv, f"{name} missing from {shlex.join(argv)}"
    return argv[argv.index(name) + 1]


@pytest.fixture
def deployment() -> dict[str, Any]:
    return one("Deployment")


@pytest.fixture
def worker(deployment: dict[str, Any]) -> dict[str, Any]:
    return container(deployment)


def drain_timeout(worker: dict[str, Any]) -> float:
    """What the container will drain for: its WORKERPOOL_DRAIN_TIMEOUT, else the code's default."""
    value = env_value(worker, "WORKERPOOL_DRAIN_TIMEOUT")
    return float(value) if value is not None else DEFAULTS.drain_timeout


def test_the_container_runs_the_supervisor_on_an_app_pool(worker: dict[str, Any]) -> None:
    argv = worker["command"] + worker.get("args", [])
    assert argv[:2] == ["workerpool", "run"]
    args = build_parser().parse_args(argv[1:])
    module, _, attribute = args.app.partition(":")
    assert module and attribute, f"APP:POOL expected, got {args.app!r}"


def test_grace_period_covers_drain_plus_margin(deployment, worker) -> None:
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    drain = drain_timeout(worker)
    assert grace > drain + SHUTDOWN_MARGIN, (
        f"terminationGracePeriodSeconds={grace} leaves no room after a {drain}s drain "
        f"+ {SHUTDOWN_MARGIN}s margin (drain + release): the kubelet's SIGKILL would land "
        f"before the release"
    )
    assert float(env_value(worker, GRACE_ENV) or "nan") == grace, (
        f"{GRACE_ENV} must repeat terminationGracePeriodSeconds so that the supervisor "
        f"refuses at start a drain_timeout that does not fit"
    )


@pytest.mark.parametrize("probe", ["livenessProbe", "startupProbe"])
def test_probe_is_the_healthcheck_command(worker: dict[str, Any], probe: str) -> None:
    argv = worker[probe]["exec"]["command"]
    assert argv[:2] == ["workerpool", "healthcheck"]
    args = build_parser().parse_args(argv[1:])  # a real subcommand and options (exit 2 if not)
    assert args.dir == env_value(worker, DIR_ENV), "the probe must read where `run` writes"
    max_age = float(option(argv, "--max-age"))
    assert max_age > HEARTBEAT_PERIOD * 3, "a probe must tolerate a few missed heartbeats"
    assert max_age > DEFAULTS.hang_timeout, (
        "the supervisor replaces a hung child after hang_timeout; the pod restart comes after that"
    )
    assert worker[probe]["timeoutSeconds"] >= 2, "python start-up must fit in the probe timeout"


def test_heartbeat_dir_is_a_private_path_on_a_memory_emptydir(deployment, worker) -> None:
    heartbeat_dir = PurePosixPath(env_value(worker, DIR_ENV) or "")
    assert heartbeat_dir.is_absolute(), f"{DIR_ENV} must be set to an absolute path"
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    mounts = [
        m
        for m in worker["volumeMounts"]
        if heartbeat_dir == PurePosixPath(m["mountPath"])
        or PurePosixPath(m["mountPath"]) in heartbeat_dir.parents
    ]
    assert len(mounts) == 1, f"{heartbeat_dir} is not on a mounted volume"
    assert not mounts[0].get("readOnly", False)
    assert volumes[mounts[0]["name"]]["emptyDir"]["medium"] == "Memory"
    assert heartbeat_dir != PurePosixPath(mounts[0]["mountPath"]), (
        "an emptyDir root is world-writable (0777), which the supervisor refuses: "
        "use a subdirectory of the mount"
    )


def test_migration_job_runs_migrate_with_the_same_image_and_database(worker) -> None:
    job = one("Job")
    migrate = container(job)
    assert migrate["command"] + migrate.get("args", []) == ["workerpool", "migrate"]
    assert migrate["image"] == worker["image"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] in ("Never", "OnFailure")
    assert env_of(migrate)["WORKERPOOL_DATABASE_URL"] == env_of(worker)["WORKERPOOL_DATABASE_URL"]


def test_database_url_comes_from_a_secret_never_a_literal() -> None:
    for doc in documents():
        for spec in doc["spec"]["template"]["spec"]["containers"]:
            url = env_of(spec)["WORKERPOOL_DATABASE_URL"]
            assert "value" not in url and "secretKeyRef" in url["valueFrom"]
            argv = " ".join(spec.get("command", []) + spec.get("args", []))
            assert "postgres" not in argv, "a database URL in argv is visible in /proc/*/cmdline"


def test_the_metrics_port_the_supervisor_serves_is_the_one_the_pod_exposes(
    deployment, worker
) -> None:
    served = int(env_value(worker, "WORKERPOOL_METRICS_PORT"))
    assert env_value(worker, "WORKERPOOL_METRICS_BIND") == "0.0.0.0"  # reachable at the pod IP
    exposed = {port["name"]: port["containerPort"] for port in worker.get("ports", [])}
    assert exposed.get("metrics") == served
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(served)


def test_the_container_forks_one_child_per_cpu_of_its_limit(worker: dict[str, Any]) -> None:
    argv = worker["command"] + worker.get("args", [])
    args = build_parser().parse_args(argv[1:])
    assert args.processes and all(p.endswith("=auto") for p in args.processes)
    # "auto" counts the container's CPU quota: without a limit it would be the node's cores
    limits = worker["resources"]["limits"]
    assert "cpu" in limits and worker["resources"]["requests"]["cpu"] == limits["cpu"]
