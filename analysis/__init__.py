"""Cross-model trace analyses: each module is a script (`python analysis/NAME.py TRACES_DIR`)."""
