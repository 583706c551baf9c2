"""workerpool's test runner, skipping the tests of Django's tests/tasks that do not apply to a
backend that keeps its jobs in a database and runs them in workers."""

from __future__ import annotations

import unittest
from typing import Any

from workerpool.contrib.django.testing import DiscoverRunner

_DUMMY = "tasks.test_dummy_backend.DummyBackendTestCase"
_IMMEDIATE = "tasks.test_immediate_backend.ImmediateBackendTestCase"

#: Test id -> why it does not apply to WorkerpoolBackend.
NOT_APPLICABLE = {
    f"{_IMMEDIATE}.test_cannot_get_result": "workerpool keeps results: get_result() works",
    f"{_IMMEDIATE}.test_cannot_refresh_result": "workerpool keeps results: refresh() works",
    f"{_IMMEDIATE}.test_cannot_pass_run_after": "workerpool supports run_after (supports_defer)",
    f"{_DUMMY}.test_refresh_result": "it edits the dummy's in-memory result; ours is the row",
    f"{_DUMMY}.test_refresh_result_async": "it edits the dummy's in-memory result; ours is the row",
}


class ContractRunner(DiscoverRunner):
    def build_suite(self, *args: Any, **kwargs: Any) -> unittest.TestSuite:
        suite = super().build_suite(*args, **kwargs)
        found = set()
        for test in _tests(suite):
            reason = NOT_APPLICABLE.get(test.id())
            if reason is not None:
                found.add(test.id())
                setattr(test, test._testMethodName, _skipped(f"not applicable: {reason}"))
        missing = set(NOT_APPLICABLE) - found
        if missing:
            raise SystemExit(f"not in Django's tests/tasks any more: {sorted(missing)}")
        return suite

    def run_suite(self, suite: unittest.TestSuite, **kwargs: Any) -> unittest.TestResult:
        result = super().run_suite(suite, **kwargs)
        failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
        passed = result.testsRun - failed - len(result.skipped) - len(result.expectedFailures)
        print(
            f"Django's tests/tasks on WorkerpoolBackend: {result.testsRun} tests, {passed} passed,"
            f" {len(result.skipped)} not applicable, {failed} failed"
        )
        return result


def _tests(suite: unittest.TestSuite) -> list[unittest.TestCase]:
    tests: list[unittest.TestCase] = []
    for item in suite:
        tests.extend(_tests(item) if isinstance(item, unittest.TestSuite) else [item])
    return tests


def _skipped(reason: str) -> Any:
    def skipped() -> None:
        raise unittest.SkipTest(reason)

    skipped.__unittest_skip__ = True  # type: ignore[attr-defined]
    skipped.__unittest_skip_why__ = reason  # type: ignore[attr-defined]
    return skipped
