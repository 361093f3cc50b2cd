"""Task sources for tests/data/heldout/: ordinary small bug-fix programs, written for this project
(not taken from any benchmark). See make_datasets.py."""

from __future__ import annotations

from typing import Any

TITLE = "heldout: ordinary bug-fix programs, unlike HumanEvalFix"
INTRO = """
Synthetic HumanEvalPack-format tasks written for this project, not copied or adapted from any
public benchmark. Each is a small everyday function (parsing, intervals, matrices, a tokenizer,
dates, an account transfer, run-length encoding, graph search, formatting, ...) with one
human-style bug: an off-by-one, a wrong operator, a missing case, a wrong variable, a copy-paste
slip. The tests are thorough (7 to 10 asserts each, edge cases included), so that a fix has to be
right, not only make one example pass.

Uses: a held-out check of the HumanEvalFix scorer (every reference must pass and every buggy
version fail, nothing flagged), and untuned data for measuring agents (issue 45). Do not tune
prompts or strategies on it.

`python tests/data/check_single_process.py tests/data/heldout/python.jsonl` runs every reference
and buggy version the classic single-process way. The rows are generated: edit
`tests/data/heldout_tasks.py` and run `python tests/data/make_datasets.py` (it also rewrites this
README). Fields are exactly HumanEvalFix's; `import`, `test_setup` and `example_test` are empty.
Task ids are `Heldout/<n>`.
"""

TASKS: list[dict[str, Any]] = [
    {
        "case": "string parsing: a duration such as `1h30m` to seconds, ValueError on bad input",
        "bug_note": r"`(\d)` instead of `(\d+)` in the findall pattern: only the last digit of a number counts",
        "imports": "import re",
        "sig": "def parse_duration(text: str) -> int:",
        "doc": """
            Return the number of seconds in a duration such as "45s", "1h30m" or "2h 5m 10s":
            whole numbers each followed by h, m or s, in any order, optionally separated by
            spaces. Raise ValueError for anything else, the empty string included.
        """,
        "body": r"""
            units = {"h": 3600, "m": 60, "s": 1}
            compact = text.replace(" ", "")
            if not compact or not re.fullmatch(r"(\d+[hms])+", compact):
                raise ValueError(f"bad duration: {text!r}")
            return sum(int(num) * units[unit] for num, unit in re.findall(r"(\d+)([hms])", compact))
        """,
        "bug": (r'r"(\d+)([hms])"', r'r"(\d)([hms])"'),
        "bug_type": "value misuse",
        "test": """
            def check(parse_duration):
                assert parse_duration("45s") == 45
                assert parse_duration("1h30m") == 5400
                assert parse_duration("2h 5m 10s") == 7510
                assert parse_duration("90m") == 5400
                assert parse_duration("0s") == 0
                assert parse_duration("1m1m") == 120
                assert parse_duration("10s 1h") == 3610
                for bad in ["", "10", "5x", "h", "1.5h", "  "]:
                    try:
                        parse_duration(bad)
                    except ValueError:
                        continue
                    raise AssertionError(f"no ValueError for {bad!r}")
        """,
    },
    {
        "case": "intervals: free periods of a day between unsorted, overlapping busy periods",
        "bug_note": "iterates over `busy` instead of `sorted(busy)`",
        "imports": "from typing import List, Tuple",
        "sig": "def free_slots(busy: List[Tuple[int, int]], day_start: int, day_end: int) -> List[Tuple[int, int]]:",
        "doc": """
            busy holds (start, end) periods in minutes, in any order and possibly overlapping.
            Return the free periods between day_start and day_end as (start, end) pairs in
            order; periods of zero length are left out.
        """,
        "body": """
            slots = []
            current = day_start
            for start, end in sorted(busy):
                if start > current:
                    slots.append((current, min(start, day_end)))
                current = max(current, end)
                if current >= day_end:
                    break
            if current < day_end:
                slots.append((current, day_end))
            return slots
        """,
        "bug": ("in sorted(busy):", "in busy:"),
        "bug_type": "missing logic",
        "test": """
            def check(free_slots):
                assert free_slots([(540, 600), (660, 720)], 480, 1020) == [(480, 540), (600, 660), (720, 1020)]
                assert free_slots([(660, 720), (540, 600)], 480, 1020) == [(480, 540), (600, 660), (720, 1020)]
                assert free_slots([], 480, 1020) == [(480, 1020)]
                assert free_slots([(400, 1100)], 480, 1020) == []
                assert free_slots([(500, 600), (550, 650)], 480, 700) == [(480, 500), (650, 700)]
                assert free_slots([(480, 500), (500, 520)], 480, 530) == [(520, 530)]
                assert free_slots([(1000, 1100)], 480, 1020) == [(480, 1000)]
                assert free_slots([(300, 400)], 480, 600) == [(480, 600)]
                busy = [(700, 800), (500, 520), (510, 530)]
                assert free_slots(busy, 480, 900) == [(480, 500), (530, 700), (800, 900)]
        """,
    },
    {
        "case": "matrix product of lists of lists, sizes checked",
        "bug_note": "`range(n)` (rows of a) instead of `range(m)` in the inner sum",
        "imports": "from typing import List",
        "sig": "def mat_mul(a: List[List[float]], b: List[List[float]]) -> List[List[float]]:",
        "doc": """
            Return the matrix product of a (n x m) and b (m x p) as a new n x p list of lists.
            Raise ValueError when a's column count is not b's row count.
        """,
        "body": """
            if not a or not b or len(a[0]) != len(b):
                raise ValueError("sizes do not match")
            n, m, p = len(a), len(b), len(b[0])
            return [[sum(a[i][k] * b[k][j] for k in range(m)) for j in range(p)] for i in range(n)]
        """,
        "bug": ("for k in range(m)", "for k in range(n)"),
        "bug_type": "variable misuse",
        "test": """
            def check(mat_mul):
                assert mat_mul([[1, 2], [3, 4]], [[5, 6], [7, 8]]) == [[19, 22], [43, 50]]
                assert mat_mul([[1, 2, 3]], [[1], [2], [3]]) == [[14]]
                assert mat_mul([[1, 0, 2], [0, 1, 0]], [[1, 2], [3, 4], [5, 6]]) == [[11, 14], [3, 4]]
                assert mat_mul([[2]], [[3]]) == [[6]]
                ident = [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
                m = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
                assert mat_mul(ident, m) == m and mat_mul(m, ident) == m
                assert mat_mul([[1], [2]], [[3, 4]]) == [[3, 4], [6, 8]]
                try:
                    mat_mul([[1, 2]], [[1, 2]])
                    raise AssertionError("no ValueError")
                except ValueError:
                    pass
        """,
    },
    {
        "case": "a tiny tokenizer for arithmetic expressions (numbers, names, operators)",
        "bug_note": "name characters tested with `isalpha()` instead of `isalnum()`: `x1` splits in two",
        "imports": "from typing import List",
        "sig": "def tokenize_expr(text: str) -> List[str]:",
        "doc": """
            Split an arithmetic expression into tokens: numbers (digits with at most one decimal
            point, such as "3", "4.25" or ".5"), names (a letter or _ followed by letters, digits
            or _) and the one-character operators + - * / ( ) ^. Spaces separate tokens and are
            dropped. Raise ValueError for any other character.
        """,
        "body": """
            tokens = []
            i = 0
            while i < len(text):
                ch = text[i]
                if ch.isspace():
                    i += 1
                elif ch.isdigit() or ch == ".":
                    j = i
                    seen_dot = False
                    while j < len(text) and (text[j].isdigit() or (text[j] == "." and not seen_dot)):
                        seen_dot = seen_dot or text[j] == "."
                        j += 1
                    tokens.append(text[i:j])
                    i = j
                elif ch.isalpha() or ch == "_":
                    j = i + 1
                    while j < len(text) and (text[j].isalnum() or text[j] == "_"):
                        j += 1
                    tokens.append(text[i:j])
                    i = j
                elif ch in "+-*/()^":
                    tokens.append(ch)
                    i += 1
                else:
                    raise ValueError(f"unexpected character {ch!r} at {i}")
            return tokens
        """,
        "bug": ("text[j].isalnum() or", "text[j].isalpha() or"),
        "bug_type": "function misuse",
        "test": """
            def check(tokenize_expr):
                assert tokenize_expr("3 + 4") == ["3", "+", "4"]
                assert tokenize_expr("4.25*(x1 - 2)") == ["4.25", "*", "(", "x1", "-", "2", ")"]
                assert tokenize_expr("rate_2^2/.5") == ["rate_2", "^", "2", "/", ".5"]
                assert tokenize_expr("  ") == []
                assert tokenize_expr("1.2.3") == ["1.2", ".3"]
                assert tokenize_expr("_tmp+a_b_c") == ["_tmp", "+", "a_b_c"]
                assert tokenize_expr("2x") == ["2", "x"]
                try:
                    tokenize_expr("3 % 2")
                    raise AssertionError("no ValueError")
                except ValueError as e:
                    assert "%" in str(e)
        """,
    },
    {
        "case": "date arithmetic on ISO strings: add months, clamp to the month's last day, leap years",
        "bug_note": "leap-year rule without the 400-year case (2000 treated as common)",
        "sig": "def add_months(day: str, months: int) -> str:",
        "doc": """
            Add months (possibly negative) to the ISO date day ("YYYY-MM-DD") and return the new
            ISO date. When the day of the month does not exist in the target month, use that
            month's last day (Gregorian calendar).
        """,
        "body": """
            year, month, d = (int(part) for part in day.split("-"))
            total = year * 12 + (month - 1) + months
            year, month = divmod(total, 12)
            month += 1
            leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
            days_in_month = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1]
            return f"{year:04d}-{month:02d}-{min(d, days_in_month):02d}"
        """,
        "bug": ("(year % 100 != 0 or year % 400 == 0)", "year % 100 != 0"),
        "bug_type": "missing logic",
        "test": """
            def check(add_months):
                assert add_months("2024-01-15", 1) == "2024-02-15"
                assert add_months("2024-01-31", 1) == "2024-02-29"
                assert add_months("2023-01-31", 1) == "2023-02-28"
                assert add_months("2024-11-30", 3) == "2025-02-28"
                assert add_months("2024-03-31", -1) == "2024-02-29"
                assert add_months("2024-01-10", -13) == "2022-12-10"
                assert add_months("2000-01-31", 1) == "2000-02-29"
                assert add_months("1900-03-31", -1) == "1900-02-28"
                assert add_months("2024-05-31", 0) == "2024-05-31"
        """,
    },
    {
        "case": "a bank-account transfer between two `Account` objects (class in the reference code), "
                "balances and histories updated in place",
        "bug_note": "`src.balance <= amount`: moving the whole balance is refused",
        "helpers": """
            class Account:
                def __init__(self, owner: str, balance: int = 0) -> None:
                    self.owner = owner
                    self.balance = balance
                    self.history = []
        """,
        "sig": "def transfer(src: Account, dst: Account, amount: int) -> bool:",
        "doc": """
            Move amount cents from src to dst, recording ("out", amount) in src.history and
            ("in", amount) in dst.history, and return True. When amount is not positive, src is
            dst, or src's balance cannot cover amount, change nothing and return False.
        """,
        "body": """
            if amount <= 0 or src is dst or src.balance < amount:
                return False
            src.balance -= amount
            dst.balance += amount
            src.history.append(("out", amount))
            dst.history.append(("in", amount))
            return True
        """,
        "bug": ("src.balance < amount", "src.balance <= amount"),
        "bug_type": "operator misuse",
        "test": """
            def check(transfer):
                a, b = Account("ann", 100), Account("bob", 5)
                assert transfer(a, b, 30) is True
                assert (a.balance, b.balance) == (70, 35)
                assert a.history == [("out", 30)] and b.history == [("in", 30)]
                assert transfer(a, b, 70) is True and a.balance == 0 and b.balance == 105
                assert transfer(a, b, 1) is False and (a.balance, b.balance) == (0, 105)
                assert transfer(b, a, 0) is False and transfer(b, a, -5) is False
                assert transfer(b, b, 10) is False and b.balance == 105
                assert len(a.history) == 2 and len(b.history) == 2
                assert transfer(b, a, 105) is True and (a.balance, b.balance) == (105, 0)
        """,
    },
    {
        "case": "run-length encoding of a string",
        "bug_note": "the last run is never written out",
        "sig": "def rle_encode(text: str) -> str:",
        "doc": """
            Run-length encode text: every run of one repeated character becomes the run's length
            followed by the character ("aaab" -> "3a1b"). The empty string encodes to "".
        """,
        "body": """
            if not text:
                return ""
            out = []
            run_char, run_len = text[0], 1
            for ch in text[1:]:
                if ch == run_char:
                    run_len += 1
                else:
                    out.append(f"{run_len}{run_char}")
                    run_char, run_len = ch, 1
            out.append(f"{run_len}{run_char}")
            return "".join(out)
        """,
        "bug": ('    out.append(f"{run_len}{run_char}")\n    return', "    return"),
        "bug_type": "missing logic",
        "test": """
            def check(rle_encode):
                assert rle_encode("aaab") == "3a1b"
                assert rle_encode("") == ""
                assert rle_encode("x") == "1x"
                assert rle_encode("aabbbcccc") == "2a3b4c"
                assert rle_encode("abab") == "1a1b1a1b"
                assert rle_encode("z" * 12) == "12z"
                assert rle_encode("  !!") == "2 2!"
                assert rle_encode("AaA") == "1A1a1A"
        """,
    },
    {
        "case": "graph BFS on an adjacency dict: shortest path as a list of nodes, cycles, unreachable goal",
        "bug_note": "path rebuilt with `while node != start`: the start node is left out",
        "imports": "from collections import deque\nfrom typing import Dict, Hashable, List, Optional",
        "sig": "def shortest_path(graph: Dict[Hashable, List[Hashable]], start: Hashable, goal: Hashable) "
               "-> Optional[List[Hashable]]:",
        "doc": """
            Return a path with the fewest edges from start to goal in the directed graph given
            as adjacency lists (neighbours tried in list order; a node that is not a key has no
            edges), as the list of nodes from start to goal inclusive: [start] when
            start == goal, None when goal cannot be reached.
        """,
        "body": """
            parents = {start: None}
            queue = deque([start])
            while queue:
                node = queue.popleft()
                if node == goal:
                    path = []
                    while node is not None:
                        path.append(node)
                        node = parents[node]
                    return path[::-1]
                for nxt in graph.get(node, []):
                    if nxt not in parents:
                        parents[nxt] = node
                        queue.append(nxt)
            return None
        """,
        "bug": ("while node is not None:", "while node != start:"),
        "bug_type": "value misuse",
        "test": """
            def check(shortest_path):
                g = {"a": ["b", "c"], "b": ["d"], "c": ["d", "e"], "d": ["f"], "e": ["f"], "f": []}
                assert shortest_path(g, "a", "f") == ["a", "b", "d", "f"]
                assert shortest_path(g, "c", "f") == ["c", "d", "f"]
                assert shortest_path(g, "a", "a") == ["a"]
                assert shortest_path(g, "f", "a") is None
                assert shortest_path(g, "a", "zzz") is None
                cyc = {1: [2], 2: [3, 1], 3: [1, 4]}
                assert shortest_path(cyc, 1, 4) == [1, 2, 3, 4]
                assert shortest_path(cyc, 3, 2) == [3, 1, 2]
                grid = {(r, c): [(r + 1, c), (r, c + 1)] for r in range(3) for c in range(3)}
                path = shortest_path(grid, (0, 0), (2, 2))
                assert len(path) == 5 and path[0] == (0, 0) and path[-1] == (2, 2)
        """,
    },
    {
        "case": "greedy word wrap into lines of at most `width` characters",
        "bug_note": "line length test forgets the joining space",
        "imports": "from typing import List",
        "sig": "def wrap_text(text: str, width: int) -> List[str]:",
        "doc": """
            Greedy word wrap: split text into words on whitespace and fill lines of at most
            width characters, words separated by one space. A word longer than width gets a
            line of its own. Text without words gives [].
        """,
        "body": """
            lines = []
            line = ""
            for word in text.split():
                if not line:
                    line = word
                elif len(line) + 1 + len(word) <= width:
                    line += " " + word
                else:
                    lines.append(line)
                    line = word
            if line:
                lines.append(line)
            return lines
        """,
        "bug": ("len(line) + 1 + len(word) <= width", "len(line) + len(word) <= width"),
        "bug_type": "missing logic",
        "test": """
            def check(wrap_text):
                assert wrap_text("the quick brown fox", 10) == ["the quick", "brown fox"]
                assert wrap_text("the quick brown fox", 9) == ["the quick", "brown fox"]
                assert wrap_text("the quick brown fox", 8) == ["the", "quick", "brown", "fox"]
                assert wrap_text("", 5) == [] and wrap_text("   ", 5) == []
                assert wrap_text("a bb ccc", 4) == ["a bb", "ccc"]
                assert wrap_text("extraordinary day", 5) == ["extraordinary", "day"]
                assert wrap_text("one  two\\nthree", 20) == ["one two three"]
                lines = wrap_text("lorem ipsum dolor sit amet consectetur adipiscing", 12)
                assert all(len(line) <= 12 for line in lines) and len(lines) == 5
        """,
    },
    {
        "case": "splitting one CSV line with quoted fields and doubled quotes",
        "bug_note": "a doubled quote is kept but its second quote is not skipped, so it closes the field",
        "imports": "from typing import List",
        "sig": "def split_csv_line(line: str) -> List[str]:",
        "doc": """
            Split one CSV line on commas. A field may be enclosed in double quotes so that it can
            hold commas; inside quotes, a doubled quote "" stands for one quote character. The
            enclosing quotes are not part of the field.
        """,
        "body": """
            fields = []
            field = []
            in_quotes = False
            i = 0
            while i < len(line):
                ch = line[i]
                if in_quotes:
                    if ch == '"':
                        if i + 1 < len(line) and line[i + 1] == '"':
                            field.append('"')
                            i += 1
                        else:
                            in_quotes = False
                    else:
                        field.append(ch)
                elif ch == '"':
                    in_quotes = True
                elif ch == ",":
                    fields.append("".join(field))
                    field = []
                else:
                    field.append(ch)
                i += 1
            fields.append("".join(field))
            return fields
        """,
        "bug": ("field.append('\"')\n                    i += 1\n", "field.append('\"')\n"),
        "bug_type": "missing logic",
        "test": r'''
            def check(split_csv_line):
                assert split_csv_line("a,b,c") == ["a", "b", "c"]
                assert split_csv_line('a,"b,c",d') == ["a", "b,c", "d"]
                assert split_csv_line('"5"" screen, 10"" case",ok') == ['5" screen, 10" case', "ok"]
                assert split_csv_line('"say ""hi""",2') == ['say "hi"', "2"]
                assert split_csv_line("") == [""]
                assert split_csv_line("a,,b,") == ["a", "", "b", ""]
                assert split_csv_line('""') == [""]
                assert split_csv_line(" x , y ") == [" x ", " y "]
        ''',
    },
    {
        "case": "comparing dotted version strings numerically, missing parts as 0",
        "bug_note": "copy-paste slip: a's padding uses `len(pb)`",
        "sig": "def compare_versions(a: str, b: str) -> int:",
        "doc": """
            Compare dotted version strings such as "1.10.2" numerically, part by part; missing
            parts count as 0, so "1.0" equals "1". Return -1 when a is older, 1 when it is newer,
            0 when they are equal.
        """,
        "body": """
            pa = [int(p) for p in a.split(".")]
            pb = [int(p) for p in b.split(".")]
            n = max(len(pa), len(pb))
            pa += [0] * (n - len(pa))
            pb += [0] * (n - len(pb))
            return (pa > pb) - (pa < pb)
        """,
        "bug": ("pa += [0] * (n - len(pa))", "pa += [0] * (n - len(pb))"),
        "bug_type": "variable misuse",
        "test": """
            def check(compare_versions):
                assert compare_versions("1.2", "1.10") == -1
                assert compare_versions("1.10.0", "1.9.9") == 1
                assert compare_versions("2.0", "2") == 0
                assert compare_versions("2", "2.0.0") == 0
                assert compare_versions("0.1", "0.1.1") == -1
                assert compare_versions("3.0.1", "3.0.0") == 1
                assert compare_versions("1.0.10", "1.0.9") == 1
                assert compare_versions("7", "7") == 0
        """,
    },
    {
        "case": "moving average over windows of k values",
        "bug_note": "`range(k, len(values) - 1)`: the last window is dropped",
        "imports": "from typing import List",
        "sig": "def moving_average(values: List[float], k: int) -> List[float]:",
        "doc": """
            Return the averages of every window of k consecutive values, in order:
            len(values) - k + 1 of them, or [] when k > len(values). k >= 1.
        """,
        "body": """
            if k > len(values):
                return []
            window = sum(values[:k])
            out = [window / k]
            for i in range(k, len(values)):
                window += values[i] - values[i - k]
                out.append(window / k)
            return out
        """,
        "bug": ("range(k, len(values))", "range(k, len(values) - 1)"),
        "bug_type": "value misuse",
        "test": """
            def check(moving_average):
                assert moving_average([1, 2, 3, 4, 5], 2) == [1.5, 2.5, 3.5, 4.5]
                assert moving_average([1, 2, 3, 4, 5], 5) == [3.0]
                assert moving_average([1, 2], 3) == []
                assert moving_average([4, 8, 6], 1) == [4.0, 8.0, 6.0]
                assert moving_average([2, 4, 6, 8], 3) == [4.0, 6.0]
                assert moving_average([], 1) == []
                assert len(moving_average(list(range(100)), 10)) == 91
                assert moving_average(list(range(100)), 10)[-1] == 94.5
        """,
    },
    {
        "case": "histogram buckets keyed by bucket start, negative values included",
        "bug_note": "`int(v / width)` truncates toward zero instead of flooring",
        "imports": "import math\nfrom typing import Dict, List",
        "sig": "def bucketize(values: List[float], width: float) -> Dict[float, int]:",
        "doc": """
            Count values per bucket [start, start + width), where start is a multiple of width
            (negative values included), and return the counts keyed by start, in ascending order
            of start.
        """,
        "body": """
            counts = {}
            for v in values:
                start = math.floor(v / width) * width
                counts[start] = counts.get(start, 0) + 1
            return dict(sorted(counts.items()))
        """,
        "bug": ("math.floor(v / width)", "int(v / width)"),
        "bug_type": "function misuse",
        "test": """
            def check(bucketize):
                assert bucketize([1, 2, 11, 12, 25], 10) == {0: 2, 10: 2, 20: 1}
                assert bucketize([-1, -10, -11, 0], 10) == {-20: 1, -10: 2, 0: 1}
                assert bucketize([], 5) == {}
                assert list(bucketize([30, 5, 17], 10)) == [0, 10, 30]
                assert bucketize([0.5, 0.25, 1.0], 0.5) == {0.0: 1, 0.5: 1, 1.0: 1}
                assert bucketize([10], 10) == {10: 1}
                assert bucketize([-5], 5) == {-5: 1}
                assert list(bucketize([-3, 3], 5)) == [-5, 0]
        """,
    },
    {
        "case": "minutes between two clock times, wrapping past midnight",
        "bug_note": "`abs(end - start)` instead of `% (24 * 60)`",
        "sig": "def minutes_between(start: str, end: str) -> int:",
        "doc": """
            Return the minutes from clock time start to clock time end ("HH:MM", 24-hour clock),
            going forward and past midnight if needed: "23:30" to "00:15" is 45. Equal times
            give 0.
        """,
        "body": """
            def minutes(t: str) -> int:
                h, m = t.split(":")
                return int(h) * 60 + int(m)

            return (minutes(end) - minutes(start)) % (24 * 60)
        """,
        "bug": ("return (minutes(end) - minutes(start)) % (24 * 60)", "return abs(minutes(end) - minutes(start))"),
        "bug_type": "function misuse",
        "test": """
            def check(minutes_between):
                assert minutes_between("09:00", "17:30") == 510
                assert minutes_between("23:30", "00:15") == 45
                assert minutes_between("12:00", "12:00") == 0
                assert minutes_between("00:00", "23:59") == 1439
                assert minutes_between("18:45", "06:15") == 690
                assert minutes_between("00:01", "00:00") == 1439
                assert minutes_between("7:05", "07:06") == 1
        """,
    },
    {
        "case": "rotating a (possibly non-square) matrix 90 degrees clockwise",
        "bug_note": "reverses after transposing instead of before: counter-clockwise",
        "imports": "from typing import Any, List",
        "sig": "def rotate_clockwise(matrix: List[List[Any]]) -> List[List[Any]]:",
        "doc": """
            Return a new matrix: matrix (r rows of c items, not necessarily square) turned 90
            degrees clockwise, so c rows of r items. The input is not changed.
        """,
        "body": """
            return [list(row) for row in zip(*matrix[::-1])]
        """,
        "bug": ("zip(*matrix[::-1])]", "zip(*matrix)][::-1]"),
        "bug_type": "operator misuse",
        "test": """
            def check(rotate_clockwise):
                assert rotate_clockwise([[1, 2], [3, 4]]) == [[3, 1], [4, 2]]
                assert rotate_clockwise([[1, 2, 3]]) == [[1], [2], [3]]
                assert rotate_clockwise([[1], [2], [3]]) == [[3, 2, 1]]
                m = [[1, 2, 3], [4, 5, 6]]
                assert rotate_clockwise(m) == [[4, 1], [5, 2], [6, 3]]
                assert m == [[1, 2, 3], [4, 5, 6]]
                r = m
                for _ in range(4):
                    r = rotate_clockwise(r)
                assert r == m
                assert rotate_clockwise([]) == []
        """,
    },
    {
        "case": "stripping a `#` comment from a config line, quotes respected",
        "bug_note": "any quote character closes a string, not only the one that opened it",
        "sig": "def strip_comments(line: str) -> str:",
        "doc": """
            Remove a # comment, and the spaces before it, from one line of a config file. A #
            inside a single- or double-quoted string is not a comment, and a quote of the other
            kind inside a string is plain text. A line without a comment is returned unchanged.
        """,
        "body": """
            quote = None
            for i, ch in enumerate(line):
                if quote:
                    if ch == quote:
                        quote = None
                elif ch in "'\\"":
                    quote = ch
                elif ch == "#":
                    return line[:i].rstrip()
            return line
        """,
        "bug": ("if ch == quote:", "if ch in \"'\\\"\":"),
        "bug_type": "variable misuse",
        "test": r"""
            def check(strip_comments):
                assert strip_comments("port = 8080  # default") == "port = 8080"
                assert strip_comments("name = 'a#b'") == "name = 'a#b'"
                assert strip_comments("msg = \"it's # here\" # note") == "msg = \"it's # here\""
                assert strip_comments("# whole line") == ""
                assert strip_comments("plain") == "plain"
                assert strip_comments("x = 'say \"hi\" #1'#c") == "x = 'say \"hi\" #1'"
                assert strip_comments("trailing   ") == "trailing   "
                assert strip_comments("") == ""
        """,
    },
    {
        "case": "splitting a bill into whole-cent shares that differ by at most one cent",
        "bug_note": "`i <= extra`: one cent too many handed out",
        "imports": "from typing import List",
        "sig": "def split_bill(total_cents: int, people: int) -> List[int]:",
        "doc": """
            Split total_cents among people as evenly as possible in whole cents: the shares
            differ by at most one cent, larger shares come first, and they add up to total_cents.
        """,
        "body": """
            base, extra = divmod(total_cents, people)
            return [base + 1 if i < extra else base for i in range(people)]
        """,
        "bug": ("i < extra", "i <= extra"),
        "bug_type": "operator misuse",
        "test": """
            def check(split_bill):
                assert split_bill(100, 3) == [34, 33, 33]
                assert split_bill(90, 3) == [30, 30, 30]
                assert split_bill(5, 4) == [2, 1, 1, 1]
                assert split_bill(2, 5) == [1, 1, 0, 0, 0]
                assert split_bill(0, 2) == [0, 0]
                assert sum(split_bill(12345, 7)) == 12345
                s = split_bill(1001, 10)
                assert max(s) - min(s) <= 1 and s == sorted(s, reverse=True)
                assert split_bill(7, 1) == [7]
        """,
    },
    {
        "case": "parsing a URL query string into lists of values, %-decoding, values containing `=`",
        "bug_note": "`rpartition` instead of `partition`: splits at the last `=`",
        "imports": "from typing import Dict, List\nfrom urllib.parse import unquote_plus",
        "sig": "def parse_query(query: str) -> Dict[str, List[str]]:",
        "doc": """
            Parse a URL query string such as "a=1&b=x%20y&a=2" into a dict from each name to the
            list of its values, in order of appearance. A part without "=" has the value "";
            empty parts are skipped; a value may itself contain "="; names and values are
            %-decoded, with "+" standing for a space.
        """,
        "body": """
            result = {}
            for part in query.split("&"):
                if not part:
                    continue
                name, _, value = part.partition("=")
                result.setdefault(unquote_plus(name), []).append(unquote_plus(value))
            return result
        """,
        "bug": ("part.partition(", "part.rpartition("),
        "bug_type": "function misuse",
        "test": """
            def check(parse_query):
                assert parse_query("a=1&b=two&a=3") == {"a": ["1", "3"], "b": ["two"]}
                assert parse_query("q=hello+world&lang=en%2Dus") == {"q": ["hello world"], "lang": ["en-us"]}
                assert parse_query("token=abc==&n=1") == {"token": ["abc=="], "n": ["1"]}
                assert parse_query("flag&x=") == {"flag": [""], "x": [""]}
                assert parse_query("") == {}
                assert parse_query("&&a=1&") == {"a": ["1"]}
                assert parse_query("k%26=v%3D") == {"k&": ["v="]}
                assert list(parse_query("z=1&y=2&z=3")) == ["z", "y"]
        """,
    },
    {
        "case": "binary search for the first item at least a target (insertion point)",
        "bug_note": "`hi = len(sorted_values) - 1`: never answers len() for a target above every item",
        "imports": "from typing import List",
        "sig": "def first_at_least(sorted_values: List[int], target: int) -> int:",
        "doc": """
            Return the index of the first item >= target in the ascending list sorted_values,
            or len(sorted_values) when every item is smaller. Use binary search.
        """,
        "body": """
            lo, hi = 0, len(sorted_values)
            while lo < hi:
                mid = (lo + hi) // 2
                if sorted_values[mid] < target:
                    lo = mid + 1
                else:
                    hi = mid
            return lo
        """,
        "bug": ("lo, hi = 0, len(sorted_values)", "lo, hi = 0, len(sorted_values) - 1"),
        "bug_type": "value misuse",
        "test": """
            def check(first_at_least):
                xs = [1, 3, 3, 5, 8]
                assert first_at_least(xs, 3) == 1
                assert first_at_least(xs, 4) == 3
                assert first_at_least(xs, 0) == 0
                assert first_at_least(xs, 8) == 4
                assert first_at_least(xs, 9) == 5
                assert first_at_least([], 1) == 0
                big = list(range(0, 2000, 2))
                assert all(first_at_least(big, t) == (t + 1) // 2 for t in range(0, 2001, 5))
                assert first_at_least(big, 5000) == 1000
        """,
    },
    {
        "case": "number formatting with thousands separators, negatives, decimals",
        "bug_note": "`len(whole) >= 3`: a leading empty group (`,123`)",
        "sig": "def format_thousands(value: float, decimals: int = 2) -> str:",
        "doc": """
            Format value with decimals digits after the point (rounded the way Python's float
            formatting rounds) and commas between groups of three digits, without using the
            "," format option: -1234567.891 gives "-1,234,567.89". No point when decimals is 0.
        """,
        "body": """
            text = f"{abs(value):.{decimals}f}"
            whole, _, frac = text.partition(".")
            groups = []
            while len(whole) > 3:
                groups.insert(0, whole[-3:])
                whole = whole[:-3]
            groups.insert(0, whole)
            sign = "-" if value < 0 else ""
            return sign + ",".join(groups) + ("." + frac if frac else "")
        """,
        "bug": ("len(whole) > 3", "len(whole) >= 3"),
        "bug_type": "operator misuse",
        "test": """
            def check(format_thousands):
                assert format_thousands(-1234567.891) == "-1,234,567.89"
                assert format_thousands(1000) == "1,000.00"
                assert format_thousands(999.5, 0) == "1,000"
                assert format_thousands(123.456, 1) == "123.5"
                assert format_thousands(0) == "0.00"
                assert format_thousands(12, 0) == "12"
                assert format_thousands(-987654, 0) == "-987,654"
                assert format_thousands(1234567890.5, 3) == "1,234,567,890.500"
        """,
    },
    {
        "case": "most frequent words with ties broken alphabetically",
        "bug_note": "sorts by `(count, word)` with `reverse=True`: ties come out reverse-alphabetical",
        "imports": "import re\nfrom collections import Counter\nfrom typing import List, Tuple",
        "sig": "def top_words(text: str, n: int) -> List[Tuple[str, int]]:",
        "doc": """
            Return the n most frequent words of text as (word, count) pairs, most frequent first
            and equal counts in alphabetical order. Words are runs of letters and apostrophes,
            compared in lower case.
        """,
        "body": r"""
            counts = Counter(re.findall(r"[a-z']+", text.lower()))
            return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]
        """,
        "bug": ("key=lambda item: (-item[1], item[0]))", "key=lambda item: (item[1], item[0]), reverse=True)"),
        "bug_type": "operator misuse",
        "test": """
            def check(top_words):
                assert top_words("the cat and the hat", 1) == [("the", 2)]
                assert top_words("b a c b a", 2) == [("a", 2), ("b", 2)]
                assert top_words("Dog dog DOG cat", 5) == [("dog", 3), ("cat", 1)]
                assert top_words("", 3) == []
                assert top_words("it's what it's", 2) == [("it's", 2), ("what", 1)]
                assert top_words("x y z", 2) == [("x", 1), ("y", 1)]
                assert top_words("one, two; two! three three three", 3) == [("three", 3), ("two", 2), ("one", 1)]
        """,
    },
    {
        "case": "camelCase / PascalCase to snake_case, acronyms and digits",
        "bug_note": "no word break before the last capital of an acronym (`HTTPResponse` stays one word)",
        "sig": "def camel_to_snake(name: str) -> str:",
        "doc": """
            Convert a camelCase or PascalCase name to snake_case. A run of capitals is one word
            ("parseHTTPResponse" -> "parse_http_response"), and digits stay with the word
            before them ("utf8Decoder" -> "utf8_decoder"). Lower-case names are unchanged.
        """,
        "body": """
            out = []
            for i, ch in enumerate(name):
                if ch.isupper():
                    prev = name[i - 1] if i > 0 else ""
                    nxt = name[i + 1] if i + 1 < len(name) else ""
                    if i > 0 and (prev.islower() or prev.isdigit() or (prev.isupper() and nxt.islower())):
                        out.append("_")
                    out.append(ch.lower())
                else:
                    out.append(ch)
            return "".join(out)
        """,
        "bug": (" or (prev.isupper() and nxt.islower())", ""),
        "bug_type": "missing logic",
        "test": """
            def check(camel_to_snake):
                assert camel_to_snake("camelCase") == "camel_case"
                assert camel_to_snake("PascalCase") == "pascal_case"
                assert camel_to_snake("parseHTTPResponse") == "parse_http_response"
                assert camel_to_snake("HTTPServer") == "http_server"
                assert camel_to_snake("utf8Decoder") == "utf8_decoder"
                assert camel_to_snake("already_snake") == "already_snake"
                assert camel_to_snake("getX") == "get_x"
                assert camel_to_snake("ID") == "id"
                assert camel_to_snake("") == ""
        """,
    },
]
