"""A Django project on workerpool's Tasks backend, with its own tests (``tests.py``, run by
Django's test runner: tests/processes/test_django_tasks.py starts it)."""
