"""Cross-model trace analyses: `agent-harness analyze NAME TRACES_DIR` (or `python analysis/NAME.py` in a checkout).

Each module named in ANALYSES has `main(argv) -> int`; importing this package loads nothing heavy.
"""

ANALYSES = ("compare_models", "trajectory_similarity", "spectral", "report", "screenshot")
