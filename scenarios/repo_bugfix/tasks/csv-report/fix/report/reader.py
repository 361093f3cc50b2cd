import csv
import io


def read_rows(text: str) -> list[dict[str, str]]:
    """Rows of a CSV with a header line, as dicts keyed by column name."""
    lines = text.strip().splitlines()
    header = next(csv.reader([lines[0]]))
    return [dict(zip(header, row, strict=True)) for row in csv.reader(io.StringIO("\n".join(lines[1:])))]
