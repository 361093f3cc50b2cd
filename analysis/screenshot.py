"""Script form of `agent-harness analyze screenshot` (its code is in the agent_harness.analysis package)."""
import sys

from agent_harness.analysis.screenshot import main

if __name__ == "__main__":
    sys.exit(main())
