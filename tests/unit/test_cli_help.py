"""The help texts speak to the person running the command: what the tool is, an example of
each subcommand, and how `dead retry` checks tasks. Run as a user does: a real process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from workerpool.cli.helptext import EXAMPLES

pytestmark = pytest.mark.slow  # the CLI as a subprocess: one Python a command


def help_of(*command: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "workerpool", *command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_top_level_help_describes_the_tool_not_the_module():
    text = help_of()
    assert "Durable background jobs for Python on PostgreSQL." in text
    assert "workerpool run myapp.jobs:pool" in text
    assert "Parses arguments" not in text and "hands over" not in text


@pytest.mark.parametrize("command", sorted(EXAMPLES))
def test_each_subcommand_shows_its_example_as_written(command):
    text = help_of(*command.split())
    example = EXAMPLES[command].splitlines()[1]  # the first example line, indentation kept
    assert example.startswith(f"  workerpool {command}")
    assert example in text.splitlines()


def test_dead_retry_says_how_it_checks_tasks():
    text = help_of("dead", "retry")
    assert "live" in text and "workers registered" in text and "--app APP:POOL" in text
