"""csvtools: small helpers around the csv module."""

import csv
import io


def rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))
