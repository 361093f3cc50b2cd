"""Settings for the payment client."""

import os

TIMEOUT_S = 10


def api_key() -> str:
    return os.environ.get("SERVICE_KEY", "")
