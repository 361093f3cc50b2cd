"""One self-contained HTML report: tables, plots and a side-by-side trace viewer (no server, no network).

Usage: python analysis/report.py TRACES_DIR [--out DIR] [--max-episodes N] [--skip similarity,spectral]
   or: agent-harness analyze report TRACES_DIR ...
Runs compare_models, trajectory_similarity and spectral (their files land in the same folder) and
writes report.html: PNGs as data: URIs, the viewer's traces as inline JSON, inline CSS and JS only.
Every piece of trace text reaches the page through textContent or an escaped table cell, and a
Content-Security-Policy with a per-file nonce blocks any script but the report's own.
"""

from __future__ import annotations

import base64
import html
import json
import re
import secrets
import sys
from datetime import UTC, datetime
from pathlib import Path
from string import Template
from typing import Any

import numpy as np
import pandas as pd

from ..sandbox.safewrite import Folder
from ..traces.store import TraceFrames, reread
from . import arms, compare_models, spectral, trajectory_similarity
from ._common import Section, fmt, parser, passed, prepare, say_caps, write_section

MAX_TABLE_ROWS = 200
MAX_VIEWER_STEPS = 400  # steps of one episode in the viewer (the first ones; the rest are counted)
MAX_PNG_BYTES = 64 << 20
OPEN_TABLE_ROWS = 25
ANALYSES = {"similarity": (trajectory_similarity, "trajectory_similarity"),
            "spectral": (spectral, "spectral")}
ASSETS = Path(__file__).resolve().parent / "_report_assets"


# -- viewer data ---------------------------------------------------------------------------------------
def _cut(text: Any, limit: int) -> str:
    text = "" if text is None else str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… [{len(text) - limit} more characters not shown]"


def _episode(frames: TraceFrames, row: pd.Series, max_text: int) -> dict[str, Any] | None:
    """What the viewer shows of one episode, read back from its trace file by the same safe reader and
    checks as the loader (None if it is gone or now refused)."""
    data = reread(frames, row["path"])
    if data is None:
        return None
    steps, out = data["steps"], data["outcome"]
    shown = []
    for s in steps[:MAX_VIEWER_STEPS]:
        args = json.dumps(s["args"], ensure_ascii=False, indent=1) if s.get("args") else None
        shown.append({"type": str(s.get("type", "?")), "turn": s.get("turn"), "tool": s.get("tool"),
                      "text": _cut(s.get("text"), max_text), "args": args and _cut(args, max_text)})
    if len(steps) > MAX_VIEWER_STEPS:
        shown.append({"type": "note", "turn": None, "tool": None, "args": None,
                      "text": f"… {len(steps) - MAX_VIEWER_STEPS} more steps not shown (the viewer shows the "
                              f"first {MAX_VIEWER_STEPS} of an episode)"})
    tokens = (out.get("prompt_tokens") or 0) + (out.get("completion_tokens") or 0)
    score_error = out.get("score_error") if isinstance(out.get("score_error"), dict) else None
    return {"model": str(row["model"]), "harness": str(row["harness"]), "sample": int(row["sample"] or 0),
            "passed": bool(out.get("passed")),
            "unscored": out.get("passed") is None,  # no verdict: the scorer failed, or scoring never ran
            "score_error": score_error and _cut(f"{score_error.get('type')}: {score_error.get('message')}", max_text),
            "compromised": out.get("compromised"), "exit_reason": out.get("exit_reason"),
            "suspicious": _cut(row.get("suspicious"), max_text) if pd.notna(row.get("suspicious")) else None,
            "turns": int(row["turns_used"]), "tokens": int(tokens), "elapsed": out.get("elapsed_seconds"),
            "error": _cut(out.get("error"), max_text), "final": _cut(out.get("final"), max_text),
            "diff": _cut(out.get("diff"), 3 * max_text),
            "test_output": _cut(out.get("test_output"), max_text),
            "prompt": _cut((data.get("prompt") or {}).get("task"), max_text), "steps": shown}


def viewer_data(frames: TraceFrames, max_episodes: int, max_text: int, max_bytes: int) -> dict[str, Any]:
    """Tasks (scenario × label × task_id) with each model's episodes, within the size limits.

    An episode's column is its arm: the model, with its protocol, harness and strategy configuration where the
    traces hold several (`arms.arm_names`: native and imported episodes, or two strategies, of a task
    side by side). Tasks that most arms ran come first; each arm contributes at
    most `max_episodes` episodes and the whole stays under about `max_bytes` of JSON.
    """
    runs = arms.with_arms(frames.runs)
    runs = runs.assign(ok=passed(runs), gold=runs["label"] != "gold", arm=arms.arm_names(runs))
    keyed = runs.groupby(["scenario", "label", "task_id"], sort=False)
    order = keyed.agg(models=("arm", "nunique"), index=("task_index", "min"), gold=("gold", "first"))
    order = order.reset_index().sort_values(["models", "scenario", "gold", "label", "index", "task_id"],
                                            ascending=[False, True, True, True, True, True])
    per_model: dict[str, int] = {}
    tasks: list[dict[str, Any]] = []
    episodes: list[dict[str, Any]] = []
    size = 0
    for key in order[["scenario", "label", "task_id"]].itertuples(index=False):
        group = keyed.get_group(tuple(key)).sort_values(["harness", "model", "sample"])
        picked = []
        for _, row in group.iterrows():
            if per_model.get(row["arm"], 0) >= max_episodes or size >= max_bytes:
                continue
            ep = _episode(frames, row, max_text)
            if ep is None:
                continue
            ep["model"] = str(row["arm"])
            size += len(json.dumps(ep, ensure_ascii=False))
            per_model[row["arm"]] = per_model.get(row["arm"], 0) + 1
            picked.append(len(episodes))
            episodes.append(ep)
        if picked:
            tasks.append({"scenario": key.scenario, "label": key.label, "task_id": key.task_id,
                          "episodes": picked})
    return {"tasks": tasks, "episodes": episodes, "total": len(runs), "max_episodes": max_episodes}


COUNT_KEY = [*arms.ARM, "scenario", "label"]


def suspicious_counts(runs: pd.DataFrame) -> pd.Series:
    """Episodes flagged suspicious (signs of a forged pass) per arm, scenario and label (`COUNT_KEY`); only
    non-zero counts."""
    runs = arms.with_arms(runs)
    counts = runs[runs["suspicious"].notna()].groupby(COUNT_KEY).size()
    return counts[counts > 0]


def _json_for_script(data: Any) -> str:
    """JSON that cannot end its <script> element or open a comment: <, > and & become \\u escapes."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


# -- HTML pieces ---------------------------------------------------------------------------------------
_MD_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")  # a backslash before ASCII punctuation (`md_inline` writes them)
_MD_ENTITY = re.compile(r"&(amp|lt|gt);")


def _prose(text: str) -> str:
    """Escaped paragraph text with the two bits of markdown the sections use (**bold**, `code`); what
    `md_inline` escaped (trace text) shows as written and opens neither."""
    held: list[str] = []

    def hold(m: re.Match[str]) -> str:  # set aside until the markup is done: an escaped * opens no <b>
        held.append(m.group(1) if m.group(0)[0] == "\\" else html.unescape(m.group(0)))
        return f"\x00{len(held) - 1}\x00"

    out = html.escape(_MD_ENTITY.sub(hold, _MD_ESCAPE.sub(hold, text.replace("\x00", ""))))
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", out)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    out = re.sub("\x00([0-9]+)\x00", lambda m: html.escape(held[int(m.group(1))]), out)
    return "".join(f"<p>{p.replace(chr(10), ' ')}</p>" for p in out.split("\n\n"))


def _table(df: pd.DataFrame, caption: str, name: str) -> str:
    shown = df.head(MAX_TABLE_ROWS).map(lambda v: fmt(v) if isinstance(v, float | np.floating) else v)
    body = shown.to_html(index=False, escape=True, na_rep="–", border=0, classes="data")
    more = (f"<p class=note>{len(df) - MAX_TABLE_ROWS} more rows in <code>{html.escape(name)}.csv</code></p>"
            if len(df) > MAX_TABLE_ROWS else "")
    head = f"{html.escape(caption)} <span class=muted>({len(df)} rows · {html.escape(name)}.csv)</span>"
    opened = " open" if len(df) <= OPEN_TABLE_ROWS else ""
    return f"<details{opened}><summary>{head}</summary><div class=scroll>{body}</div>{more}</details>"


def _plot(caption: str, png: bytes) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (f"<figure><img alt=\"{html.escape(caption)}\" src=\"data:image/png;base64,{data}\">"
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def _section(sec: Section, anchor: str, images: dict[Path, bytes]) -> str:
    parts = [f"<section id=\"{anchor}\"><h2>{html.escape(sec.title)}</h2>", *map(_prose, sec.caps + sec.text)]
    parts += [_plot(c, images[p]) for c, p in sec.plots if p in images]
    parts += [_table(t, c, n) for n, c, t in sec.tables]
    return "\n".join(parts) + "</section>"


def unscored_counts(runs: pd.DataFrame) -> pd.Series:
    """Episodes without a verdict (`passed` null) per arm, scenario and label (`COUNT_KEY`); only non-zero counts."""
    runs = arms.with_arms(runs)
    counts = runs[runs["passed"].isna()].groupby(COUNT_KEY).size()
    return counts[counts > 0]


def summary_table(table: pd.DataFrame, unscored: pd.Series | None = None,
                  suspicious: pd.Series | None = None) -> pd.DataFrame:
    """The headline: one row per scenario × label, one column per arm (`arms.arm_names`: "model
    [harness]" when the traces hold several harnesses, and so on), "pass@1 [95 % CI]" cells.

    An attack label's cell adds the compromise rate, and any cell the count of unscored episodes
    (see `unscored_counts`) and of suspicious ones (`suspicious_counts`); pass@k and the rest are in
    the sections below.
    """
    def cell(r: pd.Series) -> str:
        text = "–" if pd.isna(r.get("pass@1")) else f"{r['pass@1']:.3f} [{r['pass@1 lo']:.2f}, {r['pass@1 hi']:.2f}]"
        if r["label"] != "gold" and pd.notna(r.get("compromised")):
            text += f" · compromised {r['compromised']:.2f}"
        key = tuple(r[c] for c in COUNT_KEY)
        if n := 0 if unscored is None else int(unscored.get(key, 0)):
            text += f" · {n} UNSCORED"
        if n := 0 if suspicious is None else int(suspicious.get(key, 0)):
            text += f" · {n} SUSPICIOUS"
        return text

    cells = table.assign(cell=table.apply(cell, axis=1), n=table["tasks"].astype(str),
                         arm=arms.arm_names(table))
    wide = cells.pivot_table(index=["scenario", "label"], columns="arm", values="cell", aggfunc="first")
    tasks = cells.groupby(["scenario", "label"])["tasks"].max()
    wide.insert(0, "tasks", tasks)
    return wide.fillna("–").reset_index().rename_axis(columns=None)


def render(frames: TraceFrames, sections: list[tuple[str, Section]], viewer: dict[str, Any],
           source: str, images: dict[Path, bytes]) -> str:
    """The page; `images` holds the bytes of the sections' plots (by path)."""
    runs = frames.runs
    meta = (f"{len(runs)} episodes · {runs['model'].nunique()} models · {runs['scenario'].nunique()} "
            f"scenarios · from {source} · {datetime.now(UTC):%Y-%m-%d %H:%M UTC}")
    if frames.skipped:
        meta += f" · {len(frames.skipped)} unreadable trace file(s) skipped"
    unscored = unscored_counts(runs)
    if len(unscored):
        meta += (f" · {int(unscored.sum())} UNSCORED episode(s): no verdict (the scorer failed), "
                 "marked in the table and the viewer")
    note = (f"The viewer holds {len(viewer['episodes'])} of {viewer['total']} episodes (at most "
            f"{viewer['max_episodes']} per model, tasks that most models ran first; long texts cut, and "
            f"episodes to their first {MAX_VIEWER_STEPS} steps).")
    suspicious = suspicious_counts(runs)
    if len(suspicious):
        meta += (f" · {int(suspicious.sum())} SUSPICIOUS episode(s): failed for signs of a forged pass, "
                 "counted per model in the table")
    headline = summary_table(sections[0][1].table("pass_at_k"), unscored, suspicious)
    nonce = secrets.token_urlsafe(16)
    page = Template((ASSETS / "page.html").read_text(encoding="utf-8"))
    return page.substitute(
        csp=f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'nonce-{nonce}'; "
            "base-uri 'none'; form-action 'none'",
        css=(ASSETS / "report.css").read_text(encoding="utf-8"), meta=html.escape(meta),
        nav=" · ".join(f"<a href=\"#{a}\">{html.escape(s.title)}</a>" for a, s in sections),
        headline=headline.to_html(index=False, escape=True, border=0, classes="data"),
        viewer_note=html.escape(note), sections="\n".join(_section(s, a, images) for a, s in sections),
        data=_json_for_script(viewer), nonce=nonce, js=(ASSETS / "viewer.js").read_text(encoding="utf-8"),
    )


def build(frames: TraceFrames, out: Folder | Path, source: str, skip: set[str], max_episodes: int = 50,
          max_text: int = 2000, max_mb: float = 8.0) -> Path:
    """Run the analyses into `out` and write `out/report.html` (no link followed, see `safewrite`)."""
    out = Folder.of(out)
    sections = [("models", compare_models.analyze(frames, out))]
    write_section(sections[0][1], out, "compare_models")
    for key, (module, name) in ANALYSES.items():
        if key not in skip:
            sec = module.analyze(frames, out)
            write_section(sec, out, name)
            sections.append((key, sec))
    for _, sec in sections:
        say_caps(sec)
    images = {png: data for _, sec in sections for _, png in sec.plots
              if (data := out.read(png.name, MAX_PNG_BYTES)) is not None}
    viewer = viewer_data(frames, max_episodes, max_text, int(max_mb * 1e6))
    # Trace text arrives without lone surrogates (trace_io); "replace" keeps any other source from failing the page.
    page = render(frames, sections, viewer, source, images).encode("utf-8", errors="replace")
    return out.write("report.html", page)


def main(argv: list[str] | None = None) -> int:
    p = parser("report", __doc__.splitlines()[0])
    p.add_argument("--max-episodes", type=int, default=50, help="episodes per model in the trace viewer")
    p.add_argument("--max-text", type=int, default=2000, help="characters kept of each step's text")
    p.add_argument("--max-mb", type=float, default=8.0, help="rough cap on the viewer's inline trace data")
    p.add_argument("--skip", default="", help=f"comma-separated analyses to leave out: {','.join(ANALYSES)}")
    args = p.parse_args(argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if unknown := skip - ANALYSES.keys():
        p.error(f"--skip: unknown {', '.join(sorted(unknown))}; valid: {', '.join(ANALYSES)}")
    frames, out = prepare(args)
    path = build(frames, out, args.traces.name or str(args.traces), skip, args.max_episodes, args.max_text,
                 args.max_mb)
    print(f"wrote {path} ({path.lstat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
