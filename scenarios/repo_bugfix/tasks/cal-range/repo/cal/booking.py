from datetime import date

from .ranges import days


def nights(check_in: date, check_out: date) -> int:
    """Nights stayed: check-out day itself is not a night."""
    return (check_out - check_in).days


def weekend_days(start: date, end: date) -> int:
    """Saturdays and Sundays from start to end, both included."""
    return sum(1 for d in days(start, end) if d.weekday() >= 5)
