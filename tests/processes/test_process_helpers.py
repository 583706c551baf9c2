"""The harness's process-group kill (``tests.helpers.processes.kill_group``): the teardown of
one test must never signal a group number that the kernel may have given to another test's
supervisor since (a CI run wraps ``pid_max`` here, 32768)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers.processes import group_alive, kill_group
from tests.helpers.waiting import wait_until

#: A leader that starts a sleeper in its own process group, then exits.
LEAVES_A_SLEEPER = (
    "import subprocess, sys; "
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])"
)


def test_a_reaped_leader_whose_group_is_gone_is_not_signalled(monkeypatch):
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    proc.wait(10)
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "killpg", lambda pgid, sig: sent.append((pgid, sig)))
    kill_group(proc)
    assert sent == []


def test_what_is_left_of_a_group_is_killed_after_its_leader_exited():
    proc = subprocess.Popen([sys.executable, "-c", LEAVES_A_SLEEPER], start_new_session=True)
    proc.wait(10)
    wait_until(lambda: group_alive(proc.pid), 10, message="the sleeper in the leader's group")
    kill_group(proc)
    wait_until(lambda: not group_alive(proc.pid), 10, message="the group killed")
