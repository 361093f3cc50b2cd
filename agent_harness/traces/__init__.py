"""The trace: its typed model and steps (model.py, steps.py), writing and resuming (store.py), safe
reading and checking (files.py, check.py), frames for the analyses (frames.py), step embeddings
(embeddings.py), and other tools' formats (formats/)."""
