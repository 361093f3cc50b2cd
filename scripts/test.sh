#!/usr/bin/env bash
# The whole suite, `make test`. Without arguments it runs in two passes: the tests that load no model,
# spread over one pytest-xdist worker per core, then the real-model tests (marked `model` or `vllm`) one
# at a time, since each engine or model already uses every core (two at once would only fight over
# them). Each pass ends with its slowest tests (--durations), so a CI log shows where its time went.
# Arguments (a file, -k, -m ...) run one plain pytest with them instead.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=.venv/bin/python
if [ "$#" -gt 0 ]; then
    exec "$PY" -m pytest -q "$@"
fi
workers=$(nproc 2>/dev/null || echo 1)
"$PY" -m pytest -q -n "$workers" -m "not model and not vllm" --durations=15
light=$?
"$PY" -m pytest -q -m "model or vllm" --durations=15
heavy=$?
if [ "$light" -ne 0 ] || [ "$heavy" -ne 0 ]; then
    echo "tests failed: exit $light without models, $heavy with them" >&2
    exit 1
fi
