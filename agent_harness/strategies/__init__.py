"""The strategies, each a loop that reads top to bottom: react (the tool agent), reflect, single-shot
(bigcode's calibrated recipe and a chat form), reflect-react (chain.py) and search; with the episode's
state, its history, the worked example (demo.py) and their settings (config.py). Which strategies
exist and how a run builds their episodes is `agent_harness.run.episodes`."""
