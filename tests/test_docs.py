"""The documentation site builds strictly, says what the code does, and the README stays short and links into it."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agent_harness.cli import parser
from agent_harness.settings import PREFIX, VARIABLES

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_README_LINES = 200
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# What a newcomer looks for first, each one click from the README (issue 46).
FIRST_CLICKS = ("docs/models.md#adding-a-model", "docs/strategies.md#react-the-tool-agent",
                "docs/sandbox.md#threat-model", "docs/results.md")


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of `config` into `site`, offline (no fonts or plugins that fetch)."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config),
                           "--site-dir", str(site)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = build(ROOT / "mkdocs.yml", out)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def page(site: Path, doc: str) -> Path:
    """The built HTML of docs/`doc` (use_directory_urls: x.md -> x/index.html)."""
    stem = Path(doc).with_suffix("")
    return site / "index.html" if stem.name == "index" else site / stem / "index.html"


def test_every_page_in_the_nav_is_built(site: Path) -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["strict"] is True and config["theme"]["font"] is False

    def docs(nav: object) -> list[str]:
        if isinstance(nav, str):
            return [nav]
        if isinstance(nav, list):
            return [d for item in nav for d in docs(item)]
        return [d for v in nav.values() for d in docs(v)] if isinstance(nav, dict) else []

    listed = docs(config["nav"])
    assert len(listed) == len(set(listed)) >= 15
    assert all(page(site, d).is_file() for d in listed), [d for d in listed if not page(site, d).is_file()]


def test_the_cli_reference_is_the_parser(site: Path) -> None:
    html = page(site, "cli.md").read_text()
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) >= {"run", "validate", "analyze", "export"}
    for name, p in sub.choices.items():
        assert f'id="agent-harness-{name}"' in html
        flags = {s for a in p._actions for s in a.option_strings if s.startswith("--") and a.help != argparse.SUPPRESS}
        assert flags and all(f in html for f in flags), sorted(f for f in flags if f not in html)


def test_the_environment_table_is_the_settings_registry(site: Path) -> None:
    html = page(site, "environment.md").read_text()
    assert all(f"<code>{PREFIX}{name.upper()}</code>" in html for name in VARIABLES)


def test_a_broken_link_or_a_page_left_out_of_the_nav_fails_the_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    with (docs / "index.md").open("a") as f:
        f.write("\nSee [the numbers](results.md#no-such-heading).\n")
    (docs / "stray.md").write_text("# Not in the nav\n")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config.update(docs_dir=str(docs), hooks=[str(ROOT / h) for h in config["hooks"]])
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    done = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    assert "does not contain an anchor '#no-such-heading'" in done.stderr and "stray.md" in done.stderr


def readme_links() -> list[str]:
    return [t for t in LINK.findall(README.read_text()) if not re.match(r"[a-z]+:", t)]


def test_the_readme_is_short() -> None:
    assert len(README.read_text().splitlines()) <= MAX_README_LINES


def test_the_readme_links_resolve(site: Path) -> None:
    links = readme_links()
    assert set(FIRST_CLICKS) <= set(links), set(FIRST_CLICKS) - set(links)
    for target in links:
        path, _, anchor = target.partition("#")
        assert (ROOT / path).exists(), target
        if path.startswith("docs/") and path.endswith(".md"):
            built = page(site, path.removeprefix("docs/"))
            assert built.is_file(), f"{target}: not a page of the site"
            assert not anchor or f'id="{anchor}"' in built.read_text(), f"{target}: no such heading"
