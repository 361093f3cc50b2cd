"""Trace strings in generated documents are inline text: the analyses' .md files, the dataset card and the HTML
report get model names, hf_ids, devices, versions, labels, scenarios, task ids and the embedding model with
every kind of line ending, raw HTML and Markdown markup in them, and what a Markdown parser makes of each
document has no heading, table row, list, quote, code block, link, image or HTML of theirs.

Through the real commands (`analyze`, `export`) on a synthetic traces folder; each document is parsed with
markdown-it (CommonMark with GitHub tables), the parser `rich` ships with.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agent_harness.analysis import _synthetic as syn
from agent_harness.run.summary import summarize, write_summary
from agent_harness.text import md_inline

markdown_it = pytest.importorskip("markdown_it")

ROOT = Path(__file__).resolve().parent.parent
LINE_ENDINGS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
MARKUP = ("# Forged heading\n<details><summary>open me</summary>\n<img src=x onerror=alert(1)>\n"
          "| forged | row |\n|---|---|\n> quoted\n- listed\n1. numbered\n```\nfenced\n"
          "[a link](http://evil.example/) ![an image](http://evil.example/i.png) `code` *em* __strong__ "
          "\\ $math$ ~~struck~~ &amp; <b>bold</b>")
EVIL = "".join(f"{c}line{n} " for n, c in enumerate(LINE_ENDINGS)) + "\r\n" + MARKUP
# Model, scenario and label are folder names of the trace path: under 255 bytes, no "/".
SHORT = LINE_ENDINGS + "\r\n# Forged heading <img src=x onerror=alert(1)> | forged | `code` [a link](x) *em* $math$"
HOSTILE_WORDS = ("Forged heading", "open me", "onerror", "forged", "quoted", "listed", "numbered", "fenced",
                 "evil.example", "struck", "math", "bold")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "agent_harness.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600, env=env)


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two models on three tasks: one named with every line ending and markup, the other plain; the hostile
    strings also in hf_id, device, harness_version, the embedding model, label, scenario and task ids."""
    root = tmp_path_factory.mktemp("md") / "traces"
    rng = np.random.default_rng(0)
    for model, ok in ((SHORT, True), ("plain", False)):
        for i in range(3):
            t = syn.episode(model, SHORT, SHORT, i, ok, rng, turns=2, dim=8, task_prefix=EVIL)
            t["model"].update(hf_id=EVIL, device=EVIL)
            t["harness_version"] = EVIL
            t["embeddings"]["model"] = EVIL
            syn.write(root, t)
    write_summary(root, summarize(root))  # the card quotes summary.json too
    return root


def tokens(text: str) -> list:
    md = markdown_it.MarkdownIt("commonmark").enable("table")
    flat = []
    for tok in md.parse(text):
        flat.append(tok)
        flat.extend(tok.children or [])
    return flat


def no_raw_line_endings(text: str) -> None:
    assert not set(text) & (set(LINE_ENDINGS) - {"\n"}), "a raw line ending other than \\n"


def nothing_of_theirs(text: str, headings: int, allowed_fences: tuple[str, ...] = ()) -> list:
    """No HTML, link, quote or list of theirs; images only our PNGs; as many headings as we wrote, in plain
    text; their words in no code span; fenced blocks only ours."""
    no_raw_line_endings(text)
    toks = tokens(text)
    kinds = {t.type for t in toks}
    assert not kinds & {"html_block", "html_inline", "link_open", "blockquote_open", "ordered_list_open"}, kinds
    assert all(re.fullmatch(r"[a-z_0-9]+\.png", t.attrs["src"]) for t in toks if t.type == "image")
    assert sum(t.type == "heading_open" for t in toks) == headings
    for n, t in enumerate(toks):
        if t.type == "heading_open":  # ours; a model's name in one is plain text
            assert {c.type for c in toks[n + 1].children or []} <= {"text"}, toks[n + 1].content
        if t.type == "code_inline":  # ours only (file names)
            assert not any(w in t.content for w in HOSTILE_WORDS), t.content
        if t.type in ("fence", "code_block"):
            assert t.info in allowed_fences, (t.type, t.info, t.content[:200])
    rendered = markdown_it.MarkdownIt("commonmark").enable("table").render(text)
    for tag in ("<img src=\"x", "<details", "<summary", "<b>", "<a ", "<blockquote", "<h1>Forged", "<ol"):
        assert tag not in rendered, tag
    return toks


def tables_are_whole(toks: list, csv_rows: list[int]) -> None:
    """Each table: every row has the header's cell count, and as many body rows as its CSV."""
    bodies, n = [], 0
    while n < len(toks):
        if toks[n].type == "table_open":
            rows, cells, head = [], 0, None
            while toks[n].type != "table_close":
                if toks[n].type == "tr_open":
                    cells = 0
                elif toks[n].type in ("th_open", "td_open"):
                    cells += 1
                elif toks[n].type == "tr_close":
                    head = cells if head is None else head
                    rows.append(cells)
                n += 1
            assert set(rows) == {head}, rows
            bodies.append(len(rows) - 1)
        n += 1
    assert bodies[: len(csv_rows)] == csv_rows


def test_md_inline_is_one_line_of_text() -> None:
    out = md_inline(EVIL)
    assert "\n" not in out and len(out.splitlines()) == 1 and "<" not in out
    toks = tokens(out)
    assert [t.type for t in toks if t.type.endswith("_open")] == ["paragraph_open"]
    assert {t.type for t in toks if t.nesting == 0 and t.type != "inline"} <= {"text", "softbreak"} | {"inline"}
    rendered = markdown_it.MarkdownIt("commonmark").render(out)
    assert rendered.count("<p>") == 1 and "<img" not in rendered and "<code>" not in rendered


def test_the_analyses_markdown_keeps_trace_text_inline(traces: Path, tmp_path: Path) -> None:
    import pandas as pd

    out = tmp_path / "out"
    for name in ("compare_models", "trajectory_similarity"):
        r = cli("analyze", name, str(traces), "--out", str(out))
        assert r.returncode == 0, r.stderr[-3000:]
    text = (out / "compare_models.md").read_text(encoding="utf-8")
    toks = nothing_of_theirs(text, headings=1 + text.count("\n## "))
    csvs = ["pass_at_k", "pairwise", "solved_matrix", "solved_only"]
    tables_are_whole(toks, [len(pd.read_csv(out / f"{c}.csv")) for c in csvs])
    text = (out / "trajectory_similarity.md").read_text(encoding="utf-8")
    toks = nothing_of_theirs(text, headings=1 + text.count("\n## "))
    tables_are_whole(toks, [len(pd.read_csv(out / "similarity_matrix.csv"))])
    assert md_inline(EVIL) in text  # the embedding model's name, shown as written


def test_the_dataset_card_keeps_trace_text_inline(traces: Path, tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    r = cli("export", str(traces), "--to", str(tmp_path / "ds"))
    assert r.returncode == 0, r.stderr[-3000:]
    text = (tmp_path / "ds" / "README.md").read_text(encoding="utf-8")
    front, body = text.split("\n---\n", 1)[0], text.split("\n---\n", 1)[1]
    assert "onerror" not in front
    # Ours: '# agent-harness traces', '## Summary', '## Run configuration', one '###' per model, '## Contents'.
    toks = nothing_of_theirs(body, headings=6, allowed_fences=("python", "json"))
    tables_are_whole(toks, [2])  # the summary table: one row per model × scenario × label × mode
    items = [t for t in toks if t.type == "list_item_open"]
    assert len(items) == 2 * 5 + 3  # five per model, three under Contents (no file was skipped)
    for field in ("hf_id", "device", "harness_version"):
        assert f"{field} {md_inline(EVIL)}" in body or f"{field}: {md_inline(EVIL)}" in body


def test_the_html_report_shows_trace_text_without_markup(traces: Path, tmp_path: Path) -> None:
    r = cli("analyze", "report", str(traces), "--out", str(tmp_path / "rep"), "--skip", "spectral")
    assert r.returncode == 0, r.stderr[-3000:]
    page = (tmp_path / "rep" / "report.html").read_text(encoding="utf-8")
    for tag in ("<img src=x", "<details><summary>open me", "<b>bold", "<a href=\"http://evil"):
        assert tag not in page, tag
    assert "$math$" in page  # the embedding model's name in the prose: as written, markdown escapes undone
