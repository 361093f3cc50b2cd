def deep_merge(base: dict, override: dict) -> dict:
    """Return a new dict: `override` on top of `base`, merging nested dicts key by key."""
    result = dict(base)
    for key, value in override.items():
        result[key] = value
    return result
