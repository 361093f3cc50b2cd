"""Where `load_traces` lived before the trace modules moved to `agent_harness.traces`; the name keeps
working here for code that imports it (`from agent_harness.trace import load_traces`)."""

from .traces.store import load_traces

__all__ = ["load_traces"]
