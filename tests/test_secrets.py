"""No secret the harness holds reaches its output (issue 44): a server that quotes the API key back, in a 401
body or in its replies, through the real CLI (a loopback server the test starts); the registry's rules for
what may name a secret; the redaction of a secret's encoded forms."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml

from agent_harness import secrets
from agent_harness.errors import ConfigError
from agent_harness.registry import load_registry

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-h44-" + "Zq8xK2pL9vR4tY7w" * 2  # what the test's variable holds
KEY_ENV = "H44_TEST_API_KEY"


class Echoing(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that quotes the Authorization header it got: in the reply text of the
    first task's episode, and in a 401 body for every other request (as OpenAI's API does)."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        auth = self.headers.get("Authorization", "")
        if b"Task Python/0" in body:
            status = 200
            text = f"THOUGHT: the header was {auth} (or {json.dumps(auth)})\nFINAL: done"
            payload: dict[str, Any] = {"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                                    "finish_reason": "stop"}],
                                       "usage": {"prompt_tokens": 10, "completion_tokens": 5}}
        else:
            status = 401
            payload = {"error": {"message": f"Incorrect API key provided: {auth}. You can find your API key at "
                                            "https://example.invalid/keys.", "type": "invalid_request_error"}}
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def echoing() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echoing)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def registry(tmp_path: Path, base_url: str, **openai: Any) -> Path:
    path = tmp_path / "reg" / "models.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump({"default": "remote", "models": [{
        "name": "remote", "backend": "openai",
        "openai": {"base_url": base_url, "model": "m", "api_key_env": KEY_ENV, "stream": False, "max_retries": 0,
                   "timeout_s": 30, **openai}}]}))
    return path


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_harness.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600,
                          env={**os.environ, KEY_ENV: KEY, "HF_HUB_OFFLINE": "1",
                               "PYTHONPATH": str(ROOT), "AGENT_HARNESS_OPENAI_BACKOFF_S": "0.01"})


def forms(key: str) -> list[str]:
    """The key as it could be written: raw, JSON-escaped, in a Basic header, base64."""
    return [key, json.dumps(key)[1:-1], base64.b64encode(key.encode()).decode()]


def assert_nowhere(key: str, texts: dict[str, str]) -> None:
    for where, text in texts.items():
        for form in forms(key):
            assert form not in text, f"the key reached {where}"


def files_text(folder: Path) -> dict[str, str]:
    """Every file under `folder` as text (parquet files read as their rows: their pages are compressed)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if not p.is_file():
            continue
        if p.suffix == ".parquet":
            import pyarrow.parquet as pq

            out[str(p)] = json.dumps(pq.read_table(p).to_pylist(), default=str)
        else:
            out[str(p)] = p.read_bytes().decode("utf-8", "replace")
    return out


def test_a_server_quoting_the_key_never_gets_it_printed_stored_or_exported(tmp_path: Path, echoing: str) -> None:
    out, exported = tmp_path / "out", tmp_path / "dataset"
    r = cli("run", "--registry", str(registry(tmp_path, echoing)), "--n", "2", "--concurrency", "1",
            "--agent", "react", "--no-embed", "--no-progress", "--out", str(out), "-v")
    assert r.returncode != 0 and "HTTP 401: Incorrect API key provided: Bearer [REDACTED]" in r.stderr, r.stderr[-3000:]
    traces = list(out.rglob("run_*.json"))
    assert traces, r.stderr[-3000:]
    stored = files_text(out)
    assert any("[REDACTED]" in text for name, text in stored.items() if "run_" in name)  # the echo was stored
    e = cli("export", str(out), "--to", str(exported))
    assert e.returncode == 0, e.stderr[-3000:]
    assert_nowhere(KEY, {"stdout": r.stdout, "stderr": r.stderr, "export stdout": e.stdout + e.stderr,
                         **stored, **files_text(exported)})


def test_export_redacts_traces_written_before_redaction(tmp_path: Path) -> None:
    """A trace that holds the key verbatim (an older harness wrote it) is exported without it, as long as
    the variable holding the key is set."""
    out = tmp_path / "out"
    r = cli("run", "--models", "oracle", "--n", "1", "--agent", "react", "--no-embed", "--no-progress",
            "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    [path] = out.rglob("run_*.json")
    data = json.loads(path.read_text())
    data["outcome"]["error"] = f"HTTP 401: Incorrect API key provided: Bearer {KEY}"
    data["steps"][0]["text"] = f"key={KEY}"
    path.write_text(json.dumps(data))
    e = cli("export", str(out), "--to", str(tmp_path / "dataset"))
    assert e.returncode == 0, e.stderr[-3000:]
    exported = files_text(tmp_path / "dataset")
    assert_nowhere(KEY, exported)
    assert any("Bearer [REDACTED]" in text for text in exported.values())


# -- what a registry may name ----------------------------------------------------------------------

def test_a_registry_found_in_the_current_folder_may_not_read_secrets(tmp_path: Path, echoing: str) -> None:
    """A hostile models.yaml in the folder a user runs from could send any variable (a cloud secret) to a
    URL of its choosing: found implicitly, it may not name api_key_env; given with --registry it may."""
    reg = registry(tmp_path, echoing)
    r = cli("run", "--n", "1", "--no-embed", "--no-progress", "--out", str(tmp_path / "o"), cwd=reg.parent)
    assert r.returncode == 2, r.stderr[-3000:]
    [line] = r.stderr.strip().splitlines()
    assert "api_key_env" in line and "--registry" in line, line
    r = cli("models", "--registry", str(reg), cwd=reg.parent)
    assert r.returncode == 0 and "remote" in r.stdout, r.stderr[-3000:]


def test_registry_refuses_credentials_in_urls_and_odd_variable_names(tmp_path: Path) -> None:
    for url, openai, why in ((f"http://user:{KEY}@127.0.0.1:1/v1", {}, "credentials in the URL"),
                             ("file:///etc/passwd", {}, "http:// or https://"),
                             ("http://127.0.0.1:1/v1", {"api_key_env": "A=B; x"}, "not an environment variable")):
        path = registry(tmp_path, url, **openai)
        with pytest.raises(ConfigError, match=why) as err:
            load_registry(path)
        assert KEY not in str(err.value) and "\n" not in str(err.value)


# -- redaction itself ------------------------------------------------------------------------------

def test_every_form_of_a_registered_secret_is_redacted() -> None:
    key = "tok-" + "a1B2c3D4e5F6" * 3 + "/+="
    secrets.register(key)
    basic = base64.b64encode(f"someone:{key}".encode()).decode()
    for text in (f"Bearer {key}", json.dumps({"h": key}), f"?key={quote(key, safe='')}",
                 f"Authorization: Basic {basic}", base64.urlsafe_b64encode(key.encode()).decode()):
        shown = secrets.redact(text)
        assert key not in shown and "[REDACTED]" in shown, (text, shown)
    assert secrets.redact_value({"a": [f"x {key}"], key: 1}) == {"a": ["x [REDACTED]"], "[REDACTED]": 1}
    # a cut never leaves a prefix of the secret behind
    assert secrets.redact_head("x" * 10 + key, 20) == "x" * 10 + "[REDACTED]"
    secrets.register("short")  # too short to tell from ordinary text: not a secret
    assert secrets.redact("a short word") == "a short word"


def test_variables_named_like_secrets_are_registered() -> None:
    secrets.register_environment({"HF_TOKEN": "hf_v4lueOfAToken", "TOKENIZERS_PARALLELISM": "false-ish-value",
                                  "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG"})
    assert secrets.redact("hf_v4lueOfAToken wJalrXUtnFEMI/K7MDENG false-ish-value") == (
        "[REDACTED] [REDACTED] false-ish-value")
