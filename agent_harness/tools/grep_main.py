"""The grep tool's program. It runs inside the sandbox as ``python3 -c <this file's text> PATTERN PATH LIMIT``
(the model's regex never runs in the harness): matches as ``path:line: text``, exit 1 when none, 2 for a
bad pattern. It uses only the standard library and must stay a single self-contained file."""

import os
import re
import stat
import sys
from collections.abc import Iterator


def files(base: str) -> Iterator[str]:
    if not os.path.isdir(base):
        yield base
        return
    for d, dirs, names in os.walk(base):
        dirs[:] = sorted(x for x in dirs if x not in (".git", "__pycache__"))
        for n in sorted(names):
            yield os.path.normpath(os.path.join(d, n))


def main(pattern: str, base: str, limit: int) -> int:
    try:
        rx = re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as e:
        print(f"invalid regular expression {pattern!r}: {e}", file=sys.stderr)
        return 2
    hits = 0
    for path in files(base):
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            with open(path, "rb") as f:
                data = f.read(2_000_000)
        except OSError:
            continue
        if b"\0" in data[:8192]:
            continue
        for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if rx.search(line):
                hits += 1
                if hits <= limit:
                    text = line.strip()
                    print(f"{path}:{n}: {text[:200]}{' ...' if len(text) > 200 else ''}")
    if hits > limit:
        print(f"[... {hits - limit} more matches not shown; narrow the pattern or the path]")
    return 0 if hits else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
