"""The docs stay true: the settings reference matches the code, the README stays short, and
every link between README, docs/ and the repository resolves (files and headings)."""

from __future__ import annotations

import re
from pathlib import Path

from tracejudge.settings import Settings
from tracejudge.settings.reference import reference

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
        "python -m tracejudge.settings.reference > docs/configuration.md"
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


# Every command of the README's shell blocks, and where it is run: a test file (or script) and
# a text that file holds where it runs it. A new README command fails here until it is run.
RUN_BY: dict[str, tuple[str, str]] = {
    # the demo script is bootstrap.sh and `tracejudge demo`, which the demo test runs
    "./scripts/demo.sh": ("scripts/demo.sh", "exec .venv/bin/tracejudge demo"),
    "./scripts/test.sh": (".ci/run", "exec ./scripts/test.sh"),
    "./scripts/bootstrap.sh": ("scripts/test.sh", "scripts/bootstrap.sh"),
    ".venv/bin/tracejudge demo": ("tests/integration/serving_demo.py", '"demo", "--serve"'),
    ".venv/bin/python -m": ("tests/integration/test_demo_serve.py", '"-m", f"examples.{example}"'),
    "tracejudge ui": ("tests/integration/test_demo_serve.py", "with explorer(demo_env"),
    "tracejudge tail": ("tests/integration/test_cli.py", '"tail", "evaluations"'),
    "tracejudge show": ("tests/integration/test_show.py", '"show", *args'),
    "pip install": ("scripts/bootstrap.sh", 'pip install -q -e ".[$extras]"'),
    "export": ("tests/integration/harness.py", "env = {**os.environ, **self.env}"),
    "tracejudge worker": ("tests/integration/harness.py", 'command: str = "worker"'),
}


def readme_commands() -> list[str]:
    """The README's shell commands, continuation lines joined, comments and variables cut."""
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    commands = []
    for line in lines:
        for part in line.split("#", 1)[0].split("&&"):
            words = [w for w in part.split() if not re.fullmatch(r"[A-Z_]+=\S*", w)]
            if words:
                commands.append(" ".join(words))
    return commands


def test_every_readme_command_is_run_by_a_test_or_the_ci() -> None:
    commands = readme_commands()
    assert len(commands) >= 8
    for command in commands:
        keys = [k for k in RUN_BY if command.startswith(k)]
        assert keys, f"README command not run by any test: {command!r} (add it to RUN_BY)"
        where, needle = RUN_BY[max(keys, key=len)]
        assert needle in (ROOT / where).read_text(), f"{command!r}: {where} no longer runs it"


def test_the_readme_demo_table_is_the_demos() -> None:
    """The table the README shows is what the demo's sample traces are expected to give."""
    from tracejudge.streams.demo.samples import sample_traces

    text = (ROOT / "README.md").read_text()
    for trace in sample_traces("readme"):
        row = re.search(rf"^{re.escape(trace.name)}\s+\d+\s+\w+\s+(\w+)\s+(\w+)", text, re.M)
        assert row is not None, trace.name
        assert (row[1], row[2]) == (str(trace.expect_success), str(trace.expect_incomplete))
