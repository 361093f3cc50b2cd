"""Traces in other tools' formats, at the edge of the package (nothing else imports these modules but the CLI).

- export (`agent-harness export TRACES --to DIR --format inspect|atif`): `exporting`, with `inspect_log`
  (Inspect AI eval logs, written with inspect_ai's API) and `atif` (Harbor's ATIF v1.7, one JSON per episode).
- import (`agent-harness import SRC --to TRACES`): `importing`, with `atif`, `inspect_log` and `mini`
  (mini-swe-agent `.traj.json`). Foreign files are hostile input: `_read` reads them, `_episode` checks
  every value on the way into the trace model.

The Hugging Face dataset export (`--format hf`, the default) is `agent_harness.traces.formats.hf`.
"""

EXPORT_FORMATS = ("hf", "inspect", "atif")
IMPORT_FORMATS = ("auto", "atif", "inspect", "mini")
