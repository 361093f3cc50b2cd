"""Our Inspect export in `inspect view`: the viewer, started on 127.0.0.1, serves an exported log and headless
Chromium shows its task ids and scores.

The page loads its logs with fetches after the first paint, so the test drives Chromium through the DevTools
protocol (a local WebSocket, aiohttp: an inspect_ai dependency) and reads the page's text until it shows them,
instead of --dump-dom after a virtual-time budget (virtual time does not wait for the viewer's fetches).
`python tests/test_formats_inspect_view.py` writes docs/inspect-view.png the same way.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run"]
WAIT_S = 90


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def export_logs(out: Path) -> Path:
    """Scripted runs of oracle and null on two tasks, exported as Inspect logs; returns the oracle's log."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    run = [sys.executable, "-m", "agent_harness.cli"]
    subprocess.run([*run, "run", "--models", "oracle,null", "--agent", "react", "--n", "2", "--out",
                    str(out / "traces"), "--no-embed", "--no-progress"], cwd=ROOT, env=env, check=True,
                   capture_output=True, timeout=600)
    subprocess.run([*run, "export", str(out / "traces"), "--to", str(out / "logs"), "--format", "inspect"], cwd=ROOT,
                   env=env, check=True, capture_output=True, timeout=600)
    from inspect_ai.log import read_eval_log

    return next(p for p in sorted((out / "logs").glob("*.eval"))
                if read_eval_log(str(p), header_only=True).eval.model.endswith("/oracle"))


def stop(proc: subprocess.Popen[bytes]) -> None:
    """End a process group this test started (its own, by its id)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def serve(logs: Path) -> Iterator[str]:
    """`inspect view` on 127.0.0.1 over `logs`; yields its URL."""
    port = free_port()
    inspect = Path(sys.executable).with_name("inspect")
    proc = subprocess.Popen([str(inspect), "view", "start", "--log-dir", str(logs), "--host", "127.0.0.1", "--port",
                             str(port), "--no-trust-content"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read(100)
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError("inspect view exited") from None
                time.sleep(0.3)
        yield f"http://127.0.0.1:{port}/"
    finally:
        stop(proc)


async def _page_text(url: str, wanted: list[str], png: Path | None, size: str) -> str:
    import aiohttp

    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
                                 f"--window-size={size}", url], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        try:
            assert proc.stderr is not None
            port = None
            for line in proc.stderr:  # "DevTools listening on ws://127.0.0.1:<port>/..."
                if m := re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line):
                    port = m[1]
                    break
            assert port, "chromium gave no DevTools port"
            pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
            ws_url = next(p["webSocketDebuggerUrl"] for p in pages if p["type"] == "page")
            async with aiohttp.ClientSession() as session, session.ws_connect(ws_url, max_msg_size=0) as ws:
                ids = iter(range(1, 1 << 30))

                async def call(method: str, **params: object) -> dict[str, object]:
                    n = next(ids)
                    await ws.send_json({"id": n, "method": method, "params": params})
                    while True:
                        msg = await ws.receive_json(timeout=30)
                        if msg.get("id") == n:
                            return dict(msg.get("result") or {})

                text, deadline = "", time.monotonic() + WAIT_S
                while time.monotonic() < deadline:
                    got = await call("Runtime.evaluate", expression="document.body ? document.body.innerText : ''",
                                     returnByValue=True)
                    text = str(dict(got.get("result") or {}).get("value") or "")  # type: ignore[call-overload]
                    if all(w in text for w in wanted):
                        break
                    await asyncio.sleep(0.5)
                if png is not None:
                    await asyncio.sleep(1.0)  # let the last layout settle
                    shot = await call("Page.captureScreenshot", format="png")
                    png.write_bytes(base64.b64decode(str(shot["data"])))
                return text
        finally:
            stop(proc)  # type: ignore[arg-type]


def page_text(url: str, wanted: list[str], png: Path | None = None, size: str = "1400,800") -> str:
    """The text Chromium shows at `url` once it holds every string of `wanted` (or after WAIT_S)."""
    return asyncio.run(_page_text(url, wanted, png, size))


@pytest.mark.slow
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium not installed (setup installs it)")
def test_inspect_view_shows_our_export(tmp_path: Path) -> None:
    pytest.importorskip("inspect_ai")
    pytest.importorskip("aiohttp")
    log = export_logs(tmp_path)
    for url in serve(log.parent):
        text = page_text(f"{url}#/logs/{log.name}", ["Python/0", "Python/1", "ACCURACY"], tmp_path / "shot.png")
        assert "Python/0" in text and "Python/1" in text, text[:2000]  # the task ids
        assert re.search(r"^C$", text, re.M) and re.search(r"ACCURACY\s+1\.0", text, re.I), text[:2000]  # scores
        assert "agent-harness/oracle" in text and (tmp_path / "shot.png").stat().st_size > 10_000


if __name__ == "__main__":  # regenerate docs/inspect-view.png
    with tempfile.TemporaryDirectory() as tmp:
        log = export_logs(Path(tmp))
        for url in serve(log.parent):
            page_text(f"{url}#/logs/{log.name}", ["Python/0", "Python/1", "ACCURACY"],
                      ROOT / "docs" / "inspect-view.png", size="1280,600")
    print("wrote docs/inspect-view.png")
