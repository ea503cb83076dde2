"""Every relative link in the README, docs/, clusters/ and benchmarks/ pages points at a file of the repo, and every
#anchor at a heading of the page it names."""

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FRONT_PAGES = [ROOT / "README.md", ROOT / "clusters" / "README.md", ROOT / "benchmarks" / "README.md"]
PAGES = [*FRONT_PAGES, *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    headings = re.findall(r"^#+ (.+)$", text, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def test_the_pages_are_found():
    assert all(page.is_file() for page in FRONT_PAGES)
    assert {ROOT / "docs" / "security.md", ROOT / "docs" / "architecture.md", ROOT / "docs" / "guide.md"} <= set(PAGES)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        top = Path(os.path.relpath(os.path.normpath(page.parent / path), ROOT)).parts[0] if path else ""
        if (ROOT / top).is_symlink():  # GitHub does not follow a link inside a path
            broken.append(f"{target}: goes through the link {top}/; name the folder it points to")
        elif not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor}")
    assert broken == [], f"{page.relative_to(ROOT)}: {broken}"
