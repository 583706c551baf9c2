"""Example applications for workerpool. ``demo_app`` is what ``workerpool demo`` runs.

In a checkout this is the top-level ``examples/`` directory; an installed workerpool ships it as
``workerpool.examples`` (see ``[tool.setuptools.package-dir]`` in pyproject.toml), so the demo runs
from any directory.
"""
