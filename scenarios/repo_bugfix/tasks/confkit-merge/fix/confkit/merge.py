def deep_merge(base: dict, override: dict) -> dict:
    """Return a new dict: `override` on top of `base`, merging nested dicts key by key."""
    result = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = deep_merge(result[key], value)
        else:
            result[key] = value
    return result
