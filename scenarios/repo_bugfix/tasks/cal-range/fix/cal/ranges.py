from datetime import date, timedelta


def days(start: date, end: date) -> list[date]:
    """Every day from start to end, both included."""
    n = (end - start).days
    return [start + timedelta(days=i) for i in range(n + 1)]
