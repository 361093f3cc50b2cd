"""`python -m agent_harness.cli`: the same as `agent-harness`."""

import sys

from . import main

sys.exit(main())
