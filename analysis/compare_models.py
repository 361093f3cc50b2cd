"""Script form of `agent-harness analyze compare_models` (its code is in the agent_harness.analysis package)."""
import sys

from agent_harness.analysis.compare_models import main

if __name__ == "__main__":
    sys.exit(main())
