"""The docs stay true: the settings reference matches the code, the README stays short, and
every link between README, docs/ and the repository resolves (files and headings)."""

from __future__ import annotations

import re
from pathlib import Path

from tracejudge.streams.settings import Settings
from tracejudge.streams.settings_reference import reference

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_the_settings_reference_is_current_and_complete() -> None:
    written = (ROOT / "docs" / "configuration.md").read_text()
    assert written == reference(), (
        "docs/configuration.md is stale: "
        "python -m tracejudge.streams.settings_reference > docs/configuration.md"
    )
    for name in Settings.model_fields:
        assert f"`TRACEJUDGE_{name.upper()}`" in written, name


def test_the_readme_is_short() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


def test_every_link_resolves() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "examples/README.md"]
    broken = []
    for page in pages:
        for target in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path_part, _, anchor = target.partition("#")
            path = (page.parent / path_part).resolve() if path_part else page
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
                continue
            if anchor and path.suffix == ".md":
                headings = re.findall(r"(?m)^#{1,6} (.*)$", path.read_text())
                if anchor not in {slug(h) for h in headings}:
                    broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken
