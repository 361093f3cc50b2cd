"""Payment client: builds request headers from the settings."""

import config


def headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {config.api_key()}", "Timeout": str(config.TIMEOUT_S)}
