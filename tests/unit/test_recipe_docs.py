"""docs/recipes/*.md show only code that runs: every ```python block of a recipe page is an
excerpt, verbatim, of the example it links to (examples/, run by tests/processes/test_recipe_*;
or a project under tests/apps/ with tests of its own),
and every relative link resolves. (test_docs.py runs the docs/*.md samples themselves; a recipe
needs its framework and a worker, so its test runs the example instead.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs" / "recipes").glob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def test_there_is_a_page_per_recipe():
    assert {page.stem for page in PAGES} >= {"fastapi", "django", "flask"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_each_sample_is_an_excerpt_of_the_tested_example(page: Path):
    text = page.read_text()
    links = [page.parent / target for target in LINK.findall(text) if "://" not in target]
    for link in links:
        assert link.resolve().exists(), f"{page.name}: broken link {link}"
    examples = [
        link.resolve() for link in links if {"examples", "apps"} & set(link.resolve().parts)
    ]  # tests/apps: a project
    assert examples, f"{page.name} links to no example"
    folder = examples[0].parent if examples[0].name == "__init__.py" else None
    sources = list(folder.glob("*.py")) if folder else [examples[0]]
    code = "\n".join(source.read_text() for source in sources)
    blocks = BLOCK.findall(text)
    assert blocks, f"{page.name} shows no code"
    for block in blocks:
        assert block in code, f"{page.name}: this sample is not in {examples[0].name}:\n{block}"
