"""Task sources for tests/data/heldout/: ordinary small bug-fix programs, written for this project
(not taken from any benchmark). See make_datasets.py."""

from __future__ import annotations

from typing import Any

TITLE = "heldout: ordinary bug-fix programs, unlike HumanEvalFix"
INTRO = """
Synthetic HumanEvalPack-format tasks written for this project, not copied or adapted from any
public benchmark. Each is a small everyday function (parsing, intervals, matrices, a tokenizer,
dates, an account transfer, run-length encoding, graph search, formatting, paths, money, inventory,
geometry, scheduling, an undo stack, validation, a state machine, statistics, ...) with one
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
    {
        "case": "path normalisation: `.`, `..` and repeated slashes, absolute and relative paths",
        "bug_note": "a `..` after a kept `..` pops it instead of adding another (`../../a` gives `a`)",
        "sig": "def normalize_path(path: str) -> str:",
        "doc": """
            Normalise a slash-separated path without touching the file system: repeated slashes
            and "." parts are dropped, and ".." removes the part before it. At the root of an
            absolute path ".." is dropped ("/../a" -> "/a"); in a relative path a ".." with
            nothing left to remove is kept ("../a/../../b" -> "../../b"). A trailing slash is
            dropped. An empty relative result is ".", an empty absolute one "/".
        """,
        "body": """
            absolute = path.startswith("/")
            parts = []
            for part in path.split("/"):
                if part in ("", "."):
                    continue
                if part == "..":
                    if parts and parts[-1] != "..":
                        parts.pop()
                    elif not absolute:
                        parts.append("..")
                else:
                    parts.append(part)
            joined = "/".join(parts)
            if absolute:
                return "/" + joined
            return joined or "."
        """,
        "bug": ('if parts and parts[-1] != "..":', "if parts:"),
        "bug_type": "missing logic",
        "test": """
            def check(normalize_path):
                assert normalize_path("/usr/lib/../bin/./python") == "/usr/bin/python"
                assert normalize_path("a//b/") == "a/b"
                assert normalize_path("/../x") == "/x"
                assert normalize_path("../../a") == "../../a"
                assert normalize_path("../a/../../b") == "../../b"
                assert normalize_path("a/..") == "." and normalize_path("") == "." and normalize_path("./") == "."
                assert normalize_path("/") == "/" and normalize_path("//") == "/" and normalize_path("/..") == "/"
                assert normalize_path("x/../../y") == "../y"
                assert normalize_path("a/./b/./c/..") == "a/b"
        """,
    },
    {
        "case": "English ordinal suffixes (1st, 2nd, 3rd, 11th, 112th)",
        "bug_note": "`n in (11, 12, 13)` instead of `n % 100 in ...`: 111 gives `111st`",
        "sig": "def ordinal(n: int) -> str:",
        "doc": """
            Return the non-negative integer n followed by its English ordinal suffix: "st", "nd"
            or "rd" for numbers ending in 1, 2 or 3 and "th" for all others, where numbers
            whose last two digits are 11, 12 or 13 take "th" ("11th", "112th", "1013th").
        """,
        "body": """
            if n % 100 in (11, 12, 13):
                suffix = "th"
            else:
                suffix = {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
            return f"{n}{suffix}"
        """,
        "bug": ("if n % 100 in (11, 12, 13):", "if n in (11, 12, 13):"),
        "bug_type": "value misuse",
        "test": """
            def check(ordinal):
                assert ordinal(1) == "1st"
                assert [ordinal(i) for i in range(5)] == ["0th", "1st", "2nd", "3rd", "4th"]
                assert ordinal(11) == "11th" and ordinal(12) == "12th" and ordinal(13) == "13th"
                assert ordinal(21) == "21st" and ordinal(22) == "22nd" and ordinal(23) == "23rd"
                assert ordinal(101) == "101st"
                assert ordinal(111) == "111th"
                assert ordinal(112) == "112th" and ordinal(213) == "213th"
                assert ordinal(1013) == "1013th"
                assert ordinal(100) == "100th" and ordinal(1002) == "1002nd"
        """,
    },
    {
        "case": "calendar: the next given weekday strictly after an ISO date, across months and years",
        "bug_note": "`% 7` without `or 7`: the same weekday gives the day itself, not a week later",
        "imports": "from datetime import date, timedelta",
        "sig": "def next_weekday(day: str, weekday: str) -> str:",
        "doc": """
            Return the ISO date ("YYYY-MM-DD") of the first day strictly after the ISO date day
            that falls on weekday, an English day name in any letter case ("monday", "Friday").
            When day itself falls on weekday, the answer is one week later. Raise ValueError
            for an unknown day name.
        """,
        "body": """
            names = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
            start = date.fromisoformat(day)
            target = names.index(weekday.lower())
            ahead = (target - start.weekday()) % 7 or 7
            return (start + timedelta(days=ahead)).isoformat()
        """,
        "bug": ("% 7 or 7", "% 7"),
        "bug_type": "missing logic",
        "test": """
            def check(next_weekday):
                assert next_weekday("2024-05-15", "wednesday") == "2024-05-22"
                assert next_weekday("2024-05-15", "Friday") == "2024-05-17"
                assert next_weekday("2024-05-17", "MONDAY") == "2024-05-20"
                assert next_weekday("2024-12-30", "Monday") == "2025-01-06"
                assert next_weekday("2024-02-27", "Thursday") == "2024-02-29"
                assert next_weekday("2023-02-27", "Thursday") == "2023-03-02"
                assert next_weekday("2024-05-19", "Sunday") == "2024-05-26"
                assert next_weekday("2024-05-18", "sunday") == "2024-05-19"
                try:
                    next_weekday("2024-05-18", "Funday")
                    raise AssertionError("no ValueError")
                except ValueError:
                    pass
        """,
    },
    {
        "case": "money: an invoice total with VAT on the net sum, Decimal, halves rounded up",
        "bug_note": "`quantize` without `rounding=ROUND_HALF_UP`: halves go to the even cent",
        "imports": "from decimal import ROUND_HALF_UP, Decimal\nfrom typing import List, Tuple",
        "sig": "def invoice_total(lines: List[Tuple[str, int]], vat_percent: int) -> str:",
        "doc": """
            lines holds (unit price, quantity) pairs, each price a decimal string with at most
            two decimals such as "19.99". The net amount is the sum of price times quantity
            over all lines. VAT is vat_percent percent of the net amount, computed once on that
            sum (not per line) and rounded to the cent with halves rounded up ("0.025" becomes
            "0.03"). Return net plus VAT as a string with exactly two decimals ("0.00" when
            there are no lines).
        """,
        "body": """
            net = sum((Decimal(price) * quantity for price, quantity in lines), Decimal("0"))
            vat = (net * vat_percent / 100).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
            return str((net + vat).quantize(Decimal("0.01")))
        """,
        "bug": ('.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)', '.quantize(Decimal("0.01"))'),
        "bug_type": "missing logic",
        "test": """
            def check(invoice_total):
                assert invoice_total([("10.00", 2)], 20) == "24.00"
                assert invoice_total([], 20) == "0.00"
                assert invoice_total([("0.25", 1)], 10) == "0.28"
                assert invoice_total([("3.50", 1)], 7) == "3.75"
                assert invoice_total([("1.05", 1)], 10) == "1.16"
                assert invoice_total([("0.10", 1), ("0.10", 1), ("0.10", 1)], 5) == "0.32"
                assert invoice_total([("19.99", 3), ("0.01", 5)], 0) == "60.02"
                assert invoice_total([("5", 4), ("2.5", 0)], 25) == "25.00"
                assert invoice_total([("99.99", 1)], 15) == "114.99"
        """,
    },
    {
        "case": "inventory: reorder quantities in whole batches for items below their minimum",
        "bug_note": "ceiling division as `(short + batch) // batch`: an exact multiple orders one batch too many",
        "imports": "from typing import Dict",
        "sig": "def restock_orders(stock: Dict[str, int], minimum: Dict[str, int], batch: int) -> Dict[str, int]:",
        "doc": """
            For every item in minimum whose stock is below its minimum (an item missing from
            stock has 0), order the fewest whole batches of batch units that bring it to at
            least the minimum. Return the units to order per item, keyed by item name in
            alphabetical order; items that need nothing, and items without a minimum, are left
            out.
        """,
        "body": """
            orders = {}
            for item in sorted(minimum):
                short = minimum[item] - stock.get(item, 0)
                if short > 0:
                    orders[item] = (short + batch - 1) // batch * batch
            return orders
        """,
        "bug": ("(short + batch - 1) // batch", "(short + batch) // batch"),
        "bug_type": "value misuse",
        "test": """
            def check(restock_orders):
                assert restock_orders({"a": 0}, {"a": 50}, 25) == {"a": 50}
                stock, minimum = {"bolts": 30, "nuts": 5}, {"bolts": 50, "nuts": 5, "washers": 10}
                assert restock_orders(stock, minimum, 25) == {"bolts": 25, "washers": 25}
                assert restock_orders({"x": 3}, {"x": 10}, 1) == {"x": 7}
                assert restock_orders({"a": 60}, {"a": 50}, 10) == {}
                assert restock_orders({}, {}, 5) == {}
                assert restock_orders({"pens": 4, "ink": 100}, {"pens": 5}, 12) == {"pens": 12}
                assert list(restock_orders({}, {"zip": 1, "arc": 1, "mug": 1}, 6)) == ["arc", "mug", "zip"]
                assert restock_orders({"tape": 9}, {"tape": 10}, 4) == {"tape": 4}
                assert restock_orders({"cups": 10}, {"cups": 30}, 5) == {"cups": 20}
        """,
    },
    {
        "case": "the nearest of eight compass points to a bearing, halfway bearings going clockwise",
        "bug_note": "`round()` instead of `floor(x + 0.5)`: halves round to even, so 22.5 gives `N`",
        "imports": "import math",
        "sig": "def compass_point(bearing: float) -> str:",
        "doc": """
            Return the nearest of the eight compass points "N", "NE", "E", "SE", "S", "SW",
            "W", "NW" to a bearing in degrees (0 is north, 90 east; any real number, taken
            modulo 360). Each point covers 45 degrees centred on it; a bearing exactly halfway
            between two points belongs to the next point clockwise (22.5 gives "NE", 337.5
            gives "N").
        """,
        "body": """
            points = ["N", "NE", "E", "SE", "S", "SW", "W", "NW"]
            return points[math.floor(bearing % 360 / 45 + 0.5) % 8]
        """,
        "bug": ("math.floor(bearing % 360 / 45 + 0.5)", "round(bearing % 360 / 45)"),
        "bug_type": "function misuse",
        "test": """
            def check(compass_point):
                assert compass_point(0) == "N"
                assert compass_point(90) == "E" and compass_point(180) == "S" and compass_point(270) == "W"
                assert compass_point(22.5) == "NE"
                assert compass_point(112.5) == "SE"
                assert compass_point(350) == "N" and compass_point(337.5) == "N"
                assert compass_point(-45) == "NW" and compass_point(-180) == "S"
                assert compass_point(200) == "S" and compass_point(247) == "SW"
                assert compass_point(67.4) == "NE" and compass_point(67.5) == "E"
                assert compass_point(720 + 135) == "SE"
        """,
    },
    {
        "case": "geometry: distance from a point to a line segment, end points and a zero-length segment",
        "bug_note": "copy-paste slip: the y coordinate of the nearest point uses `t * dx`",
        "imports": "import math\nfrom typing import Tuple",
        "sig": "def segment_distance(p: Tuple[float, float], a: Tuple[float, float], b: Tuple[float, float]) -> float:",
        "doc": """
            Return the shortest distance from point p to the line segment from a to b (points
            are (x, y) pairs), that is, the distance to the segment's nearest point, which is an
            end point when p lies beyond that end. When a == b the segment is a single point.
        """,
        "body": """
            (px, py), (ax, ay), (bx, by) = p, a, b
            dx, dy = bx - ax, by - ay
            length_sq = dx * dx + dy * dy
            if length_sq == 0:
                return math.hypot(px - ax, py - ay)
            t = max(0.0, min(1.0, ((px - ax) * dx + (py - ay) * dy) / length_sq))
            return math.hypot(px - (ax + t * dx), py - (ay + t * dy))
        """,
        "bug": ("py - (ay + t * dy)", "py - (ay + t * dx)"),
        "bug_type": "variable misuse",
        "test": """
            def check(segment_distance):
                def close(x, y):
                    return abs(x - y) < 1e-9

                assert close(segment_distance((0, 1), (-1, 0), (1, 0)), 1.0)
                assert close(segment_distance((3, 4), (0, 0), (0, 0)), 5.0)
                assert close(segment_distance((5, 0), (0, 0), (3, 0)), 2.0)
                assert close(segment_distance((-2, 0), (0, 0), (3, 0)), 2.0)
                assert close(segment_distance((1, 1), (0, 0), (2, 2)), 0.0)
                assert close(segment_distance((0, 2), (0, 0), (2, 2)), 2 ** 0.5)
                assert close(segment_distance((2, 5), (0, 0), (0, 4)), 5 ** 0.5)
                assert close(segment_distance((4, 3), (1, 1), (7, 1)), 2.0)
                assert close(segment_distance((6, -1), (0, 0), (4, -2)), 5 ** 0.5)
        """,
    },
    {
        "case": "recursion over nested dicts: a JSON merge patch, None deletes, inputs left unchanged",
        "bug_note": "works on `target` itself instead of `dict(target)`: the caller's dict is changed",
        "imports": "from typing import Any",
        "sig": "def merge_patch(target: Any, patch: Any) -> Any:",
        "doc": """
            Apply a JSON merge patch. When patch is not a dict, the result is patch. Otherwise
            the result is a copy of target (an empty dict when target is not a dict) in which
            every key of patch whose value is None is removed, and every other key of patch is
            set to the merge of its old value (None when missing) with the patch's value,
            recursively. Lists are replaced, not merged. Neither argument is changed.
        """,
        "body": """
            if not isinstance(patch, dict):
                return patch
            result = dict(target) if isinstance(target, dict) else {}
            for key, value in patch.items():
                if value is None:
                    result.pop(key, None)
                else:
                    result[key] = merge_patch(result.get(key), value)
            return result
        """,
        "bug": ("result = dict(target) if", "result = target if"),
        "bug_type": "missing logic",
        "test": """
            def check(merge_patch):
                assert merge_patch({"a": 1, "b": 2}, {"b": 3}) == {"a": 1, "b": 3}
                assert merge_patch({"a": 1, "b": 2}, {"a": None, "c": None}) == {"b": 2}
                assert merge_patch({"a": {"x": 1, "y": 2}}, {"a": {"y": None, "z": 3}}) == {"a": {"x": 1, "z": 3}}
                assert merge_patch({"a": [1, 2]}, {"a": [3]}) == {"a": [3]}
                assert merge_patch({"a": 1}, {"a": {"b": {"c": None, "d": 4}}}) == {"a": {"b": {"d": 4}}}
                assert merge_patch([1, 2], {"k": "v"}) == {"k": "v"} and merge_patch({"k": "v"}, "text") == "text"
                assert merge_patch({"keep": None}, {}) == {"keep": None}
                base = {"name": "app", "opts": {"debug": False, "level": 1}}
                patch = {"opts": {"debug": True}, "name": None}
                assert merge_patch(base, patch) == {"opts": {"debug": True, "level": 1}}
                assert base == {"name": "app", "opts": {"debug": False, "level": 1}}
                assert patch == {"opts": {"debug": True}, "name": None}
        """,
    },
    {
        "case": "text table layout: column widths, numbers right-aligned, trailing spaces stripped",
        "bug_note": "`len(max(cells))` (the alphabetically last cell) instead of `max(len(cell) ...)`",
        "imports": "from typing import List",
        "sig": "def format_table(rows: List[List[str]]) -> str:",
        "doc": """
            Lay out rows of text cells (every row has the same number of cells) as aligned
            columns: each column is as wide as its longest cell and columns are separated by two
            spaces. Cells that are numbers (digits with an optional leading "-" and at most one
            ".") are right-aligned, other cells left-aligned, and trailing spaces are removed
            from every line. Return the lines joined by newlines; no rows give "".
        """,
        "body": r"""
            if not rows:
                return ""

            def is_number(cell: str) -> bool:
                digits = cell[1:] if cell.startswith("-") else cell
                return digits.replace(".", "", 1).isdigit()

            widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
            lines = []
            for row in rows:
                cells = [cell.rjust(w) if is_number(cell) else cell.ljust(w) for cell, w in zip(row, widths)]
                lines.append("  ".join(cells).rstrip())
            return "\n".join(lines)
        """,
        "bug": ("max(len(row[i]) for row in rows)", "len(max(row[i] for row in rows))"),
        "bug_type": "function misuse",
        "test": r"""
            def check(format_table):
                assert format_table([["x", "1"], ["yy", "10"]]) == "x    1\nyy  10"
                rows = [["item", "qty", "price"], ["apple", "3", "0.5"], ["kiwi", "12", "-1.25"]]
                assert format_table(rows) == "item   qty  price\napple    3    0.5\nkiwi    12  -1.25"
                assert format_table([]) == ""
                assert format_table([["only"]]) == "only"
                assert format_table([["a", "b"], ["", ""]]) == "a  b\n"
                assert format_table([["1.2.3", "-", "-5"], ["10", "x", "7"]]) == "1.2.3  -  -5\n   10  x   7"
                assert format_table([["name", "n"], ["bob", "7"], ["al", "100"]]) == "name  n\nbob     7\nal    100"
                assert format_table([["zz", "a"], ["yyyy", "b"]]) == "zz    a\nyyyy  b"
        """,
    },
    {
        "case": "scheduling: round-robin with a time quantum, finish times in finishing order",
        "bug_note": "`left >= quantum`: a job needing exactly one quantum goes back to the queue",
        "imports": "from collections import deque\nfrom typing import List, Tuple",
        "sig": "def round_robin(jobs: List[Tuple[str, int]], quantum: int) -> List[Tuple[str, int]]:",
        "doc": """
            Simulate round-robin scheduling from time 0. jobs is the initial queue of
            (name, work) pairs, work a positive number of time units. The job at the front runs
            for quantum time units, or for what it still needs when that is less; if it still
            needs more it goes to the back of the queue, otherwise it is finished. Return
            (name, finish time) pairs in the order the jobs finish.
        """,
        "body": """
            queue = deque(jobs)
            clock = 0
            finished = []
            while queue:
                name, left = queue.popleft()
                clock += min(quantum, left)
                if left > quantum:
                    queue.append((name, left - quantum))
                else:
                    finished.append((name, clock))
            return finished
        """,
        "bug": ("if left > quantum:", "if left >= quantum:"),
        "bug_type": "operator misuse",
        "test": """
            def check(round_robin):
                assert round_robin([("a", 2), ("b", 1)], 2) == [("a", 2), ("b", 3)]
                assert round_robin([("a", 3), ("b", 5), ("c", 1)], 2) == [("c", 5), ("a", 6), ("b", 9)]
                assert round_robin([], 3) == []
                assert round_robin([("x", 7)], 3) == [("x", 7)]
                assert round_robin([("x", 6)], 3) == [("x", 6)]
                assert round_robin([("a", 4), ("b", 4)], 10) == [("a", 4), ("b", 8)]
                assert round_robin([("a", 1), ("b", 1), ("c", 1)], 1) == [("a", 1), ("b", 2), ("c", 3)]
                assert round_robin([("p", 5), ("q", 2), ("r", 4)], 2) == [("q", 4), ("r", 10), ("p", 11)]
        """,
    },
    {
        "case": "an editor's undo and redo stacks (type, delete, undo, redo)",
        "bug_note": "a new edit does not clear the redo stack",
        "imports": "from typing import List",
        "sig": "def apply_edits(commands: List[str]) -> str:",
        "doc": """
            Run editor commands on an initially empty text and return the final text.
            "type <s>" appends s (everything after the first space, spaces included);
            "delete <n>" removes the last n characters (all of them when there are fewer).
            "undo" restores the text as it was before the latest change still in effect (a
            type, a delete or a redo), and "redo" reapplies the change undone most recently.
            A new type or delete makes everything undone so far impossible to redo. An undo or
            redo with nothing to undo or redo, and any other command, does nothing.
        """,
        "body": """
            text = ""
            undo, redo = [], []
            for command in commands:
                name, _, arg = command.partition(" ")
                if name in ("type", "delete"):
                    undo.append(text)
                    redo.clear()
                    text = text + arg if name == "type" else text[: max(0, len(text) - int(arg))]
                elif name == "undo" and undo:
                    redo.append(text)
                    text = undo.pop()
                elif name == "redo" and redo:
                    undo.append(text)
                    text = redo.pop()
            return text
        """,
        "bug": ("\n            redo.clear()", ""),
        "bug_type": "missing logic",
        "test": """
            def check(apply_edits):
                assert apply_edits(["type hello", "type  world"]) == "hello world"
                assert apply_edits(["type abc", "delete 1", "undo"]) == "abc"
                assert apply_edits(["type abc", "delete 5"]) == ""
                assert apply_edits(["type ab", "type cd", "undo", "undo", "redo"]) == "ab"
                assert apply_edits(["type ab", "undo", "type x", "redo"]) == "x"
                assert apply_edits(["undo", "redo", "type q"]) == "q"
                assert apply_edits([]) == ""
                assert apply_edits(["type one", "type two", "undo", "delete 1", "redo", "undo"]) == "one"
                assert apply_edits(["type abc", "delete 2", "undo", "redo", "redo"]) == "a"
                assert apply_edits(["type x", "type y", "undo", "undo", "undo", "redo", "redo", "redo"]) == "xy"
        """,
    },
    {
        "case": "validation: semantic-version strings with pre-release tags, leading zeros refused",
        "bug_note": "`len(ident) >= 1` instead of `> 1`: a pre-release identifier `0` is refused",
        "imports": "import re",
        "sig": "def is_semver(text: str) -> bool:",
        "doc": """
            Return whether text is a version MAJOR.MINOR.PATCH, optionally followed by "-" and a
            pre-release tag. MAJOR, MINOR and PATCH are non-negative integers in ASCII digits
            without a leading zero ("0" is fine, "01" is not). The tag is one or more
            identifiers separated by dots, each non-empty and made of ASCII letters, digits and
            "-"; an identifier of digits only must not have a leading zero either ("1.0.0-rc.0"
            is valid, "1.0.0-rc.01" is not). Nothing else is allowed: no spaces, no "v" prefix,
            no build metadata.
        """,
        "body": r"""
            core, dash, tag = text.partition("-")
            numbers = core.split(".")
            if len(numbers) != 3 or not all(re.fullmatch(r"0|[1-9][0-9]*", n) for n in numbers):
                return False
            if not dash:
                return True
            for ident in tag.split("."):
                if not re.fullmatch(r"[0-9A-Za-z-]+", ident):
                    return False
                if ident.isdigit() and len(ident) > 1 and ident[0] == "0":
                    return False
            return True
        """,
        "bug": ("len(ident) > 1", "len(ident) >= 1"),
        "bug_type": "operator misuse",
        "test": """
            def check(is_semver):
                assert is_semver("1.2.3") is True
                assert is_semver("0.0.0") and is_semver("10.20.30")
                assert is_semver("1.0.0-alpha.1") and is_semver("1.0.0-x-y.7z")
                assert is_semver("1.0.0-rc.0") is True
                assert is_semver("2.0.0-0")
                assert is_semver("1.0.0-0.3.7")
                assert not is_semver("1.0.0-rc.01") and not is_semver("1.0.0-007")
                bad = ["1.2", "1.2.3.4", "01.2.3", "1.02.3", "v1.2.3", "1.2.3-", "1.2.3-a..b", "1.2.3+build",
                       " 1.2.3", "1.2.x", "", "1.2.3-\\u00e4"]
                assert not any(is_semver(t) for t in bad)
        """,
    },
    {
        "case": "a small state machine: a vending machine with coins, buy and cancel",
        "bug_note": "`returned = credit` on cancel instead of `+=`: earlier change is forgotten",
        "imports": "from typing import List, Tuple",
        "sig": "def vend(events: List[str], price: int) -> Tuple[int, int]:",
        "doc": """
            Simulate a vending machine that sells one item for price cents and starts with no
            credit. "coin <cents>" adds to the credit. "buy" dispenses an item when the credit
            covers the price, hands back the change (credit minus price) and resets the credit
            to 0; with too little credit it does nothing. "cancel" hands back the whole credit
            and resets it to 0. Return (items dispensed, total cents handed back); credit still
            in the machine at the end is not handed back.
        """,
        "body": """
            credit = items = returned = 0
            for event in events:
                kind, _, amount = event.partition(" ")
                if kind == "coin":
                    credit += int(amount)
                elif kind == "buy" and credit >= price:
                    items += 1
                    returned += credit - price
                    credit = 0
                elif kind == "cancel":
                    returned += credit
                    credit = 0
            return items, returned
        """,
        "bug": ("returned += credit\n", "returned = credit\n"),
        "bug_type": "operator misuse",
        "test": """
            def check(vend):
                assert vend(["coin 100", "coin 50", "buy"], 120) == (1, 30)
                assert vend(["coin 50", "buy"], 120) == (0, 0)
                assert vend(["coin 50", "cancel"], 120) == (0, 50)
                assert vend(["coin 200", "buy", "coin 20", "cancel"], 150) == (1, 70)
                assert vend(["coin 60", "coin 60", "buy", "buy"], 120) == (1, 0)
                assert vend([], 100) == (0, 0)
                assert vend(["coin 25", "cancel", "coin 25", "cancel", "cancel"], 50) == (0, 50)
                assert vend(["coin 100", "buy", "coin 100", "buy", "coin 30"], 100) == (2, 0)
                assert vend(["coin 10", "buy", "coin 90", "buy"], 100) == (1, 0)
        """,
    },
    {
        "case": "statistics: quartiles by the median-of-halves method, odd and even counts",
        "bug_note": "upper half starts at `n // 2`: for an odd count it includes the median",
        "imports": "from typing import List, Tuple",
        "sig": "def quartiles(values: List[float]) -> Tuple[float, float, float]:",
        "doc": """
            Return (Q1, median, Q3) of values (in any order; the list is not changed) by the
            median-of-halves method: sort the values; Q1 is the median of the lower half and Q3
            the median of the upper half, where for an odd count the middle value belongs to
            neither half. The median of an even count is the mean of the two middle values.
            Raise ValueError for fewer than two values.
        """,
        "body": """
            xs = sorted(values)
            n = len(xs)
            if n < 2:
                raise ValueError("need at least two values")

            def median(seq: List[float]) -> float:
                mid = len(seq) // 2
                return seq[mid] if len(seq) % 2 else (seq[mid - 1] + seq[mid]) / 2

            return median(xs[: n // 2]), median(xs), median(xs[(n + 1) // 2 :])
        """,
        "bug": ("xs[(n + 1) // 2 :]", "xs[n // 2 :]"),
        "bug_type": "value misuse",
        "test": """
            def check(quartiles):
                assert quartiles([1, 2, 3, 4, 5]) == (1.5, 3, 4.5)
                assert quartiles([1, 2, 3, 4]) == (1.5, 2.5, 3.5)
                assert quartiles([7, 1, 3]) == (1, 3, 7)
                assert quartiles([5, 5]) == (5, 5, 5)
                assert quartiles([6, 47, 49, 15, 42, 41, 7, 39, 43, 40, 36]) == (15, 40, 43)
                data = [3.5, -1.0, 2.0, 8.0, 0.5, 4.0]
                assert quartiles(data) == (0.5, 2.75, 4.0)
                assert data == [3.5, -1.0, 2.0, 8.0, 0.5, 4.0]
                assert quartiles(list(range(1, 10))) == (2.5, 5, 7.5)
                for few in ([], [1]):
                    try:
                        quartiles(few)
                    except ValueError:
                        continue
                    raise AssertionError(f"no ValueError for {few!r}")
        """,
    },
    {
        "case": "unit conversion: centimetres to feet and inches (5'11\"), rounded to the inch",
        "bug_note": "`int(cm / 2.54)` truncates instead of rounding to the nearest inch",
        "sig": "def feet_and_inches(cm: float) -> str:",
        "doc": """
            Convert a height in centimetres (an inch is exactly 2.54 cm) to feet and inches
            written like 5'11": first round to the nearest whole inch (as Python's round does),
            then split into feet of 12 inches, so the inches are always 0 to 11.
        """,
        "body": r"""
            feet, inches = divmod(round(cm / 2.54), 12)
            return f"{feet}'{inches}\""
        """,
        "bug": ("round(cm / 2.54)", "int(cm / 2.54)"),
        "bug_type": "function misuse",
        "test": r"""
            def check(feet_and_inches):
                assert feet_and_inches(152.4) == "5'0\""
                assert feet_and_inches(180) == "5'11\""
                assert feet_and_inches(182) == "6'0\""
                assert feet_and_inches(0) == "0'0\""
                assert feet_and_inches(30.48) == "1'0\""
                assert feet_and_inches(175.26) == "5'9\""
                assert feet_and_inches(100) == "3'3\""
                assert feet_and_inches(165) == "5'5\""
                assert feet_and_inches(154.9) == "5'1\""
        """,
    },
    {
        "case": "title case for headings with minor words kept lower case except first and last",
        "bug_note": "`0 < i < len(words)`: a minor last word stays lower case",
        "sig": "def title_case(text: str) -> str:",
        "doc": """
            Title-case text for a heading: split it into words on whitespace, capitalise each
            word (first character upper case, the rest lower case) and join them with single
            spaces. The minor words a, an, and, at, but, by, for, in, of, on, or, the and to
            (in any letter case) are written all in lower case instead, unless they are the
            first or the last word.
        """,
        "body": """
            minor = {"a", "an", "and", "at", "but", "by", "for", "in", "of", "on", "or", "the", "to"}
            words = text.split()
            out = []
            for i, word in enumerate(words):
                if word.lower() in minor and 0 < i < len(words) - 1:
                    out.append(word.lower())
                else:
                    out.append(word[:1].upper() + word[1:].lower())
            return " ".join(out)
        """,
        "bug": ("0 < i < len(words) - 1", "0 < i < len(words)"),
        "bug_type": "value misuse",
        "test": r"""
            def check(title_case):
                assert title_case("what are you looking at") == "What Are You Looking At"
                assert title_case("the lord of the rings") == "The Lord of the Rings"
                assert title_case("OF MICE AND MEN") == "Of Mice and Men"
                assert title_case("  war   and\tpeace ") == "War and Peace"
                assert title_case("") == "" and title_case("a") == "A"
                assert title_case("the end of") == "The End Of"
                assert title_case("gone with the wind") == "Gone With the Wind"
                assert title_case("a tale of two cities") == "A Tale of Two Cities"
                assert title_case("rOCK aNd roll") == "Rock and Roll"
        """,
    },
    {
        "case": "truncating text at a word boundary with an ellipsis",
        "bug_note": "no check whether the cut falls right after a whole word: that word is dropped too",
        "sig": "def truncate_words(text: str, limit: int) -> str:",
        "doc": """
            Shorten text (words separated by single spaces) to at most limit characters, limit
            >= 4, for a preview. Text that fits is returned unchanged. Otherwise keep as many
            whole words as fit in limit - 3 characters and append "..."; a word that would be
            cut off is dropped. When not even the first word fits, cut it after limit - 3
            characters instead.
        """,
        "body": """
            if len(text) <= limit:
                return text
            cut = text[: limit - 3]
            if text[limit - 3] != " " and " " in cut:
                cut = cut[: cut.rfind(" ")]
            return cut.rstrip() + "..."
        """,
        "bug": ('text[limit - 3] != " " and ', ""),
        "bug_type": "missing logic",
        "test": """
            def check(truncate_words):
                assert truncate_words("hello world", 20) == "hello world"
                assert truncate_words("the quick brown fox", 12) == "the quick..."
                assert truncate_words("the quick brown fox", 13) == "the quick..."
                assert truncate_words("the quick brown fox", 19) == "the quick brown fox"
                assert truncate_words("the quick brown fox", 18) == "the quick brown..."
                assert truncate_words("supercalifragilistic", 10) == "superca..."
                assert truncate_words("one two three", 10) == "one two..."
                assert truncate_words("one two three", 11) == "one two..."
                assert truncate_words("ab cdef", 6) == "ab..."
                assert truncate_words("", 5) == ""
        """,
    },
    {
        "case": "relative time: `just now`, `1 minute ago`, `3 days ago`, `2 weeks ago`",
        "bug_note": "`seconds > size`: exactly one hour reads `60 minutes ago`",
        "sig": "def time_ago(seconds: int) -> str:",
        "doc": """
            Describe how long ago something happened from the seconds elapsed (>= 0): under 60
            seconds is "just now"; otherwise use the largest of the units week (604800 s),
            day, hour and minute that fits at least once, with a whole count rounded down and
            the unit in the singular or plural: "1 minute ago", "5 hours ago", "2 weeks ago".
        """,
        "body": """
            if seconds < 60:
                return "just now"
            for name, size in (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60)):
                if seconds >= size:
                    break
            count = seconds // size
            return f"{count} {name}{'' if count == 1 else 's'} ago"
        """,
        "bug": ("if seconds >= size:", "if seconds > size:"),
        "bug_type": "operator misuse",
        "test": """
            def check(time_ago):
                assert time_ago(5) == "just now" and time_ago(0) == "just now"
                assert time_ago(59) == "just now"
                assert time_ago(60) == "1 minute ago"
                assert time_ago(150) == "2 minutes ago"
                assert time_ago(3599) == "59 minutes ago"
                assert time_ago(3600) == "1 hour ago"
                assert time_ago(7199) == "1 hour ago"
                assert time_ago(86400 * 3 + 5) == "3 days ago"
                assert time_ago(604800) == "1 week ago"
                assert time_ago(604800 * 10 + 86399) == "10 weeks ago"
        """,
    },
    {
        "case": "a sliding-window rate limiter over request times (a deque of allowed times)",
        "bug_note": "refused requests are recorded in the window too",
        "imports": "from collections import deque\nfrom typing import List",
        "sig": "def rate_limit(times: List[float], limit: int, window: float) -> List[bool]:",
        "doc": """
            Decide, for requests arriving at the given times in seconds (ascending), whether a
            sliding-window rate limiter lets each through: a request at time t is allowed when
            fewer than limit allowed requests arrived in the window (t - window, t], so an
            allowed request stops counting exactly window seconds after it arrived. Refused
            requests never count. Return one bool per request, in order.
        """,
        "body": """
            recent = deque()
            allowed = []
            for t in times:
                while recent and recent[0] <= t - window:
                    recent.popleft()
                ok = len(recent) < limit
                if ok:
                    recent.append(t)
                allowed.append(ok)
            return allowed
        """,
        "bug": ("if ok:\n            recent.append(t)", "recent.append(t)"),
        "bug_type": "excess logic",
        "test": """
            def check(rate_limit):
                assert rate_limit([0, 1, 2, 3], 2, 10) == [True, True, False, False]
                assert rate_limit([0, 1, 2, 10, 11], 2, 10) == [True, True, False, True, True]
                assert rate_limit([], 3, 1.0) == []
                assert rate_limit([0, 0, 0], 3, 1.0) == [True] * 3
                assert rate_limit([0, 0.5, 1.0, 1.5], 1, 1.0) == [True, False, True, False]
                assert rate_limit([5, 6, 7, 8, 9, 10], 3, 3) == [True] * 6
                assert rate_limit([0, 1, 1.5, 2, 3.5], 2, 2) == [True, True, False, True, True]
                assert rate_limit([100] * 5, 2, 60) == [True, True, False, False, False]
        """,
    },
    {
        "case": "inventory accounting: cost of goods sold first-in first-out across stock lots",
        "bug_note": "`min(quantity, sold)` instead of `min(quantity, remaining)`: later lots are over-counted",
        "imports": "from typing import List, Tuple",
        "sig": "def fifo_cost(purchases: List[Tuple[int, int]], sold: int) -> int:",
        "doc": """
            purchases holds stock lots, oldest first, as (quantity, unit cost in cents) pairs.
            Return the cost in cents of selling sold units first in, first out: units come from
            the oldest lot until it is used up, then from the next one. Raise ValueError when
            the lots hold fewer than sold units.
        """,
        "body": """
            remaining = sold
            cost = 0
            for quantity, unit_cost in purchases:
                take = min(quantity, remaining)
                cost += take * unit_cost
                remaining -= take
            if remaining > 0:
                raise ValueError(f"only {sold - remaining} of {sold} units in stock")
            return cost
        """,
        "bug": ("min(quantity, remaining)", "min(quantity, sold)"),
        "bug_type": "variable misuse",
        "test": """
            def check(fifo_cost):
                assert fifo_cost([(5, 100), (5, 200)], 7) == 900
                assert fifo_cost([(10, 100)], 3) == 300
                assert fifo_cost([(5, 100)], 0) == 0 and fifo_cost([], 0) == 0
                assert fifo_cost([(2, 50), (3, 70)], 5) == 310
                assert fifo_cost([(1, 10), (1, 20), (1, 30)], 2) == 30
                assert fifo_cost([(4, 25), (4, 30), (4, 35)], 9) == 255
                assert fifo_cost([(3, 0), (2, 99)], 4) == 99
                for lots, n in (([(2, 50)], 3), ([], 1), ([(1, 5), (1, 5)], 3)):
                    try:
                        fifo_cost(lots, n)
                    except ValueError:
                        continue
                    raise AssertionError(f"no ValueError for {lots!r}, {n}")
        """,
    },
]
