"""Django's own ``tests/tasks`` (the Tasks framework's test-suite, from the sdist of the Django
installed) run against WorkerpoolBackend: ``python -m tests.apps.django_project.contract``.

Django's tests are written for its two reference backends, ``DummyBackend`` (stores, never runs)
and ``ImmediateBackend`` (runs at enqueue). The only change made to them is which classes those
names are: :mod:`.backends` has both as WorkerpoolBackends on a real database (the dummy's jobs
wait; the immediate one's run at once in this process, through the worker's own outcome code).
The tests that test a property the reference backend has and workerpool does not are listed,
each with why, in :data:`.runner.NOT_APPLICABLE`: they are skipped, and a listed test that is
missing fails the run.
"""
