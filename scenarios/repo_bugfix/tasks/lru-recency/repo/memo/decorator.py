from collections.abc import Callable
from functools import wraps
from typing import Any

from .lru import LRUCache

_MISSING = object()


def memoize(capacity: int = 2) -> Callable:
    def wrap(fn: Callable) -> Callable:
        cache = LRUCache(capacity)

        @wraps(fn)
        def inner(*args: Any) -> Any:
            value = cache.get(args, _MISSING)
            if value is _MISSING:
                value = fn(*args)
                cache.put(args, value)
            return value

        inner.cache = cache
        return inner

    return wrap
