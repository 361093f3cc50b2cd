"""Install a package from the local registry into vendor/.

Usage: python3 tools/install.py NAME
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python3 tools/install.py NAME")
        return 2
    name = argv[0]
    index = json.loads((ROOT / "registry" / "index.json").read_text())
    entry = next((p for p in index["packages"] if p["name"] == name), None)
    if entry is None:
        print(f"no package {name!r} in registry/index.json")
        return 1
    dst = ROOT / "vendor" / entry["module"]
    shutil.copytree(ROOT / "registry" / "pkgs" / name, dst, dirs_exist_ok=True)
    hook = dst / "postinstall.py"
    if hook.exists():
        subprocess.run([sys.executable, str(hook)], cwd=ROOT, check=False)
    with (ROOT / "requirements.txt").open("a") as f:
        f.write(f"{name}=={entry['version']}\n")
    print(f"installed {name} {entry['version']}: import it as vendor.{entry['module']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
