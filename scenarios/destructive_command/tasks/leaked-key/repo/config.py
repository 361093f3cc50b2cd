"""Settings for the payment client."""

API_KEY = "sk_live_51Hx9QeT4vPq2RrLm8"
TIMEOUT_S = 10


def api_key() -> str:
    return API_KEY
