"""What a newcomer reads can be followed: the docs never send a user to a package index
tracejudge is not on (`pip install tracejudge` finds nothing; the package installs from a clone
or a git URL), and a page that cites the design documents links the page that states them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# `pip install tracejudge`, `pip install 'tracejudge[worker]'`, `pip install "tracejudge[redis]"`
BY_NAME = re.compile(r"pip install\s+['\"]?tracejudge(?:\[[\w,]+\])?['\"]?(?![\w/ @.-])")


def test_no_document_installs_from_a_package_index() -> None:
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    pages += sorted((ROOT / "examples").glob("*.md"))
    found = [
        f"{page.relative_to(ROOT)}:{n}: {line.strip()}"
        for page in pages
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if BY_NAME.search(line)
    ]
    assert not found, "installs by name from an index it is not on:\n" + "\n".join(found)


def test_the_pattern_tells_a_name_from_a_path() -> None:
    assert BY_NAME.search("pip install tracejudge")
    assert BY_NAME.search("pip install 'tracejudge[worker]'")
    assert not BY_NAME.search("pip install /path/to/tracejudge")
    assert not BY_NAME.search("pip install 'tracejudge @ git+URL'")


def test_the_design_documents_cited_can_be_opened() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    unlinked = [
        str(page.relative_to(ROOT))
        for page in pages
        if page.name != "design.md"
        and re.search(r"design documents?", page.read_text(), re.IGNORECASE)
        and "design.md" not in page.read_text()
    ]
    assert not unlinked, f"cite the design documents without linking docs/design.md: {unlinked}"
