"""Script form of `agent-harness analyze trajectory_similarity` (its code is in the agent_harness.analysis package)."""
import sys

from agent_harness.analysis.trajectory_similarity import main

if __name__ == "__main__":
    sys.exit(main())
