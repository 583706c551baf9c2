"""Metrics as a test reads them: a scrape of a running supervisor's port, or the recorder of
this process (an in-process worker records to it), read back through the exporter."""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import generate_latest, values
from prometheus_client.parser import text_string_to_metric_families

from workerpool.model import metrics
from workerpool.process import exporter


def scrape(port: int) -> dict[str, object]:
    """``{family name: family}`` of one GET /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def scrape_or_none(port: int) -> dict | None:
    try:
        return scrape(port)
    except OSError:
        return None


def total(families: dict, name: str, **labels: str) -> float:
    family = families.get(name)
    if family is None:
        return 0.0
    return sum(
        sample.value
        for sample in family.samples
        if sample.name == f"{name}_total"
        and all(sample.labels.get(k) == v for k, v in labels.items())
    )


def scraped(directory: str) -> dict[tuple, float]:
    """``{(sample name, sorted labels): value}`` of what the recorder flushed to ``directory``."""
    text = generate_latest(exporter.registry(directory)).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture
def metrics_recorder(tmp_path, monkeypatch) -> Iterator[tuple[metrics.Recorder, str]]:
    """Metrics on in this process: ``(the recorder, the directory it flushes to)``; off after."""
    monkeypatch.setattr(values, "ValueClass", values.ValueClass)  # restored afterwards
    monkeypatch.delenv(metrics.MULTIPROC_ENV, raising=False)
    directory = tmp_path / "metrics"
    directory.mkdir(mode=0o700)
    yield metrics.enable(str(directory)), str(directory)
    metrics.disable()
    os.environ.pop(metrics.MULTIPROC_ENV, None)
