"""Screenshot an HTML report with headless Chromium (Debian: apt-get install -y chromium).

Usage: python analysis/screenshot.py REPORT.html OUT.png [--window-size 1400,1800]
   or: agent-harness analyze screenshot REPORT.html OUT.png
The browser runs with a fresh profile, no sandbox (it runs as root in containers), no GPU and no
background networking; the report itself needs no network.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..sandbox.safewrite import UnsafePath, read_at, write_file
from ..text import printable

MAX_PNG_BYTES = 256 << 20
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def find_chromium() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def chromium_command(browser: str, profile: Path, action: list[str], url: str,
                     window: str = "1400,1800") -> list[str]:
    """The headless command line: fixed flags, a fresh profile, then `action` (e.g. --screenshot=PNG)."""
    return [
        browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--hide-scrollbars", f"--user-data-dir={profile}", f"--window-size={window}", *action, url,
    ]


def run_chromium(report: Path, action: list[str], window: str = "1400,1800",
                 timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Open `report` in headless Chromium (throwaway profile) and perform `action`."""
    browser = find_chromium()
    if browser is None:
        raise FileNotFoundError("no chromium on PATH (Debian: apt-get install -y chromium)")
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        cmd = chromium_command(browser, Path(profile), action, report.resolve().as_uri(), window)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def screenshot(report: Path, png: Path, window: str = "1400,1800", timeout: float = 120) -> Path:
    """Write a PNG of `report` as Chromium renders it (scripts run first); raises if none was made.

    Chromium writes into a private folder; the PNG is then put in place without following a link
    (`safewrite`): a link or FIFO planted at `png` is replaced, never written through."""
    with tempfile.TemporaryDirectory(prefix="agent-harness-shot-") as private:
        shot = Path(private, "shot.png")
        proc = run_chromium(report, [f"--screenshot={shot}"], window, timeout)
        fd = os.open(private, os.O_RDONLY | os.O_DIRECTORY)
        try:
            data = read_at(fd, shot.name, MAX_PNG_BYTES)
        finally:
            os.close(fd)
    if not data:
        raise RuntimeError(f"chromium wrote no screenshot (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return write_file(png.parent, png.name, data)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="agent-harness analyze screenshot", description=__doc__.splitlines()[0])
    p.add_argument("report", type=Path, help="the HTML file (e.g. TRACES/analysis/report.html)")
    p.add_argument("png", type=Path, help="where to write the screenshot")
    p.add_argument("--window-size", default="1400,1800", help="WIDTH,HEIGHT in pixels")
    args = p.parse_args(argv)
    if not args.report.is_file():
        sys.exit(f"error: {args.report} not found")
    try:
        path = screenshot(args.report, args.png, args.window_size)
    except (FileNotFoundError, RuntimeError, subprocess.TimeoutExpired) as e:
        sys.exit(f"error: {e}")
    except UnsafePath as e:  # something planted where the PNG goes
        print(f"error: {printable(str(e))}", file=sys.stderr)
        return 2
    print(f"wrote {path} ({path.lstat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
