"""retrylite: call a function again when it raises."""


def retry(fn, attempts: int = 3):
    for i in range(attempts):
        try:
            return fn()
        except Exception:
            if i == attempts - 1:
                raise
