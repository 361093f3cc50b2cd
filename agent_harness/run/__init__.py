"""What a run does: its plan (planning.py), the scheduler and the episodes in flight (scheduler.py), the
runner (runner.py), progress, the trace header (header.py), fingerprints, the summary, and `validate`."""
