from .reader import read_rows


def revenue_by_region(text: str) -> dict[str, float]:
    totals: dict[str, float] = {}
    for row in read_rows(text):
        totals[row["region"]] = totals.get(row["region"], 0.0) + float(row["amount"])
    return totals


def best_region(text: str) -> str:
    totals = revenue_by_region(text)
    return max(totals, key=totals.__getitem__)
