"""Text from outside (model names and descriptions from YAML, task ids, server error messages, trace
file and folder names) reaches the terminal with its control characters escaped and its rich markup
shown as text: through the CLI as a subprocess, every byte of stdout and stderr is checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from agent_harness.text import printable

ROOT = Path(__file__).resolve().parent.parent
# An OSC title change, a colour, a clear screen by C1 CSI, a bidi override and a rich markup tag.
HOSTILE = "\x1b]0;owned\x07\x1b[31mred\x9b2J\u202eevil[bold red]loud[/]"
SHOWN = "\\x1b]0;owned\\x07\\x1b[31mred\\x9b2J\\u202eevil[bold red]loud[/]"


def raw_controls(text: str) -> list[str]:
    """The characters a terminal would act on (newlines and tabs aside)."""
    return [c for c in text if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) < 0xA0
            or 0xD800 <= ord(c) < 0xE000 or c in "\u202e\u2028"]


def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"}, errors="surrogateescape")
    assert not raw_controls(r.stdout), r.stdout[-3000:]
    assert not raw_controls(r.stderr), r.stderr[-3000:]
    return r


def test_printable_escapes_every_control_character() -> None:
    controls = [*range(0x20), *range(0x7F, 0xA0), 0xD800, 0xDFFF, 0x200E, 0x202E, 0x2066, 0x2028, 0x2029]
    for c in controls:
        shown = printable(chr(c))
        assert shown.startswith("\\") and shown.isascii() and shown.isprintable(), (hex(c), shown)
        assert printable(chr(c), multiline=True) == ("\n" if c == 0x0A else "\t" if c == 0x09 else shown)
    text = "plain [bold]text[/], ünïcödé, 漢字, \\x1b as typed"
    assert printable(text) == text
    assert printable(HOSTILE) == SHOWN
    assert printable("a\r\nb") == "a\\r\\nb" and printable("a\r\nb", multiline=True) == "a\\r\nb"


def test_config_errors_quote_names_escaped(tmp_path: Path) -> None:
    """A registry entry whose name is hostile: the one-line error names it, escaped."""
    reg = tmp_path / "models.yaml"
    reg.write_text(yaml.safe_dump({"models": [{"name": HOSTILE, "backend": "scripted", "script": "oracle"}]}))
    r = run("run_agents.py", "--registry", str(reg), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert SHOWN in r.stderr


@pytest.mark.parametrize("flags", [["--models", HOSTILE], ["--tasks", "Python/0," + HOSTILE], ["--scenario", HOSTILE]])
def test_hostile_flag_values_are_quoted_escaped(tmp_path: Path, flags: list[str]) -> None:
    r = run("run_agents.py", "--models", "oracle", "--no-embed", "--out", str(tmp_path / "o"), *flags)
    assert r.returncode == 2, r.stderr
    assert "\\x1b]0;owned\\x07" in r.stderr, r.stderr


def test_model_table_shows_markup_as_text(tmp_path: Path) -> None:
    """`agent-harness models`: aliases and descriptions from the YAML are shown escaped, their rich markup
    as the text it is (not bold red, not swallowed)."""
    reg = tmp_path / "models.yaml"
    reg.write_text(yaml.safe_dump({"models": [{"name": "m", "backend": "scripted", "script": "oracle",
                                               "aliases": [HOSTILE], "description": HOSTILE}]}))
    r = run("-m", "agent_harness.cli", "models", "--registry", str(reg))
    assert r.returncode == 0, r.stderr
    flat = "".join(line.strip("│ ") for line in r.stdout.splitlines())  # cells may wrap
    assert "[bold red]loud[/]" in flat and "\\x1b[31mred" in flat, r.stdout


class _Refusing(BaseHTTPRequestHandler):
    """An OpenAI-compatible server whose every answer is an error message full of escapes."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = json.dumps({"error": {"message": HOSTILE, "type": HOSTILE}}).encode()
        self.send_response(400)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture()
def refusing_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_server_error_messages_are_escaped(tmp_path: Path, refusing_server: str) -> None:
    """Whether the error ends the episode or the run, its message reaches the terminal escaped."""
    reg = tmp_path / "models.yaml"
    reg.write_text(yaml.safe_dump({"default": "remote", "models": [{
        "name": "remote", "backend": "openai",
        "openai": {"base_url": refusing_server, "model": HOSTILE, "max_retries": 0, "timeout_s": 30}}]}))
    r = run("run_agents.py", "--registry", str(reg), "--n", "1", "--no-embed", "--no-progress",
            "--out", str(tmp_path / "o"))
    assert "\\x1b[31mred" in r.stderr, r.stderr[-3000:]


def test_trace_folder_and_file_names_are_escaped(tmp_path: Path) -> None:
    """A run and an analysis of a folder whose name, and whose trace files' names, hold escapes."""
    out = tmp_path / ("traces" + HOSTILE.replace("[/]", ""))  # '/' cannot be in a name
    (out / "humanevalfix").mkdir(parents=True)
    (out / "humanevalfix" / f"run_{HOSTILE.replace('/', '')}.json").write_text('{"broken": ')
    (out / f"run_{HOSTILE.replace('/', '')}x.json").write_text("[1, 2")
    r = run("run_agents.py", "--models", "oracle", "--n", "1", "--no-embed", "--no-progress", "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    assert printable(str(out)) in r.stdout
    r = run("-m", "agent_harness.cli", "analyze", "compare_models", str(out))
    assert "run_\\x1b]0;owned" in r.stderr, r.stderr[-3000:]
