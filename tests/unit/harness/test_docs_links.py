"""Every link in README.md and docs/ resolves (issue 51): its file exists, and its anchor is a
heading of that file as GitHub makes anchors (lower case, punctuation dropped, spaces to '-')."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from support.paths import ROOT

PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "tests/cluster_logs/README.md",
]


def prose(path: Path) -> str:
    """The page less its code: fenced blocks and inline spans hold no links."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(path: Path) -> set[str]:
    return {
        re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
        for h in re.findall(
            r"^#+ (.+)$", re.sub(r"```.*?```", "", path.read_text(), flags=re.S), re.M
        )
    }


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves(page):
    for target in re.findall(r"\]\(([^)\s]+)\)", prose(page)):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.name}: {target}: no such file"
        if anchor and dest.suffix == ".md":
            assert anchor in anchors(dest), f"{page.name}: {target}: no such heading"


# made by the command that names it on that page (`sudo install -d ... compose/examples/run/output`)
MADE_THERE = {"compose/examples/run/output"}


@pytest.mark.parametrize("page", PAGES[:-1], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_and_module_a_page_names_exists(page):
    """A path in this repository (tuning/..., tests/..., benchmarks/...) is a file or folder of
    it; a dotted name (tuning.harness.verdict.rules.judge) imports, to its last attribute."""
    import importlib

    text = page.read_text()
    roots = r"(?:tuning|tests|benchmarks|docker|configs|compose)"
    for path in set(re.findall(rf"(?<![\w/.-])({roots}/[\w./-]*\w)", text)) - MADE_THERE:
        if "*" not in path:
            assert (ROOT / path).exists(), f"{page.name}: {path}: no such file or folder"
    for name in set(re.findall(r"\b(tuning(?:\.\w+)+)\b", text)):
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            for attr in parts[i:]:
                assert hasattr(obj, attr), f"{page.name}: {name}: no {attr} in {obj.__name__}"
                obj = getattr(obj, attr)
            break
        else:
            raise AssertionError(f"{page.name}: {name}: no such module")
