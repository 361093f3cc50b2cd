"""Task sources for tests/data/valuekinds/: one small function per kind of value that crosses
between the hidden test and the code under test (issue 43, item 1). See make_datasets.py."""

from __future__ import annotations

from typing import Any

TITLE = "valuekinds: values that cross between the hidden test and the code under test"
INTRO = """
Synthetic HumanEvalPack-format tasks (issue 43, item 1), written for this project. Each one is a
small realistic function whose hidden test passes, receives or expects a particular kind of value:
objects of classes the test defines (at its top level or inside `check`), objects of classes the
task's reference code defines (a dataclass, a namedtuple, an Enum, an exception class, a node class),
standard-library value types, arguments mutated in place, generators and iterators (finite, infinite,
passed in), exceptions with their real type and message, callables the test passes in or gets back,
and large or deep values (300,000 items, a 1,000-node linked list, 150 levels of nesting).

For every task the reference (`declaration + canonical_solution`) passes its test and the buggy
version (`declaration + buggy_solution`) fails it by a wrong value or wrong behaviour, when run the
classic single-process way (`exec(module + "\\n" + test)` in one fresh namespace):
`python tests/data/check_single_process.py tests/data/valuekinds/python.jsonl`. A scorer that
runs the test and the module apart must reach the same verdicts, and flag neither version as
suspicious. Several tests assert identity (`result is node`), effects on their own objects (a list
sorted in place, links rewired, an iterator consumed only so far, a closure's counter), the exact
type of a result (`type(r) is Vec`, `isinstance(d, defaultdict)`) or an exception's class and
attributes; those are the assertions a value-copying boundary gets wrong.

Spots that are easy to miss when the test and the module run in different processes:
- Classes the reference code defines (`Point`, `Interval`, `Light`, `RingNode`, `InsufficientFunds`,
  the constant `DEFAULTS`) reach the test through the reference helpers, while the module defines
  its own copy: in one process they are the same objects, so `midpoint(...) == Point(1, 2)`,
  `next_light(...) is Light.GREEN` and `except InsufficientFunds` hold there.
- Identity beyond arguments: `get_path(cfg, "db.ports") is cfg["db"]["ports"]` (a part of an
  argument returned), `other(1) is other(1)` (memoize returns its cached object twice).
- Calls back into the test, nested: the memoized `fibm(80)` recurses through the wrapper and
  the test's own function about 80 levels deep; `retry` must let the test's exception object
  through unchanged (`e is boom`); callbacks change the test's lists and counters.
- Laziness: `primes()` is endless and only sliced; `first_repeat` and `running_total` must take
  from the test's iterator only what they need (the test reads the rest itself).
- Size: 300,000-item lists both ways, a 1,000-node linked list (a chain that naive recursive
  serialisation cannot walk under the default recursion limit), 150 levels of nesting both ways.

The rows are generated: edit `tests/data/valuekinds_tasks.py` and run
`python tests/data/make_datasets.py` (it also rewrites this README). Fields are exactly HumanEvalFix's;
`import`, `test_setup` and `example_test` are empty. Task ids are `Values/<n>`.
"""

TASKS: list[dict[str, Any]] = [
    # ---------------------------------------------------------------- classes the test defines
    {
        "case": "test-defined linked-list `Node` (test top level) passed in; returns the very node passed (`is`)",
        "bug_note": "`range(1, n)` instead of `range(n)`: one step short",
        "sig": "def nth_node(head, n: int):",
        "doc": """
            Return the n-th node (counting from 0) of the singly linked list that starts at head.
            Nodes have the attributes `value` and `next`. Return None when the list has fewer
            than n + 1 nodes. The list is not changed.
        """,
        "body": """
            node = head
            for _ in range(n):
                if node is None:
                    return None
                node = node.next
            return node
        """,
        "bug": ("range(n)", "range(1, n)"),
        "bug_type": "value misuse",
        "test": """
            class Node:
                def __init__(self, value, next=None):
                    self.value = value
                    self.next = next


            def build(values):
                head, nodes = None, []
                for v in reversed(values):
                    head = Node(v, head)
                    nodes.append(head)
                return head, nodes[::-1]


            def check(nth_node):
                head, nodes = build([10, 20, 30, 40])
                assert nth_node(head, 0) is head
                assert nth_node(head, 2) is nodes[2]
                assert nth_node(head, 3) is nodes[3]
                assert nth_node(head, 3).value == 40
                assert nth_node(head, 4) is None
                assert nth_node(head, 9) is None
                assert nth_node(None, 0) is None
                assert nodes[1].next is nodes[2]
                assert isinstance(nth_node(head, 1), Node)
        """,
    },
    {
        "case": "test-defined graph nodes with a cycle passed in; a list of those nodes returned (`is`), "
                "nodes hashed by identity",
        "bug_note": "`queue.pop()` instead of `queue.popleft()`: depth-first order",
        "imports": "from collections import deque",
        "sig": "def bfs_order(start):",
        "doc": """
            Return the nodes reachable from start (start included) in breadth-first order.
            Each node has a list `edges` of its neighbours, visited in list order. The graph
            may contain cycles; every node appears once.
        """,
        "body": """
            seen = {start}
            order = []
            queue = deque([start])
            while queue:
                node = queue.popleft()
                order.append(node)
                for nxt in node.edges:
                    if nxt not in seen:
                        seen.add(nxt)
                        queue.append(nxt)
            return order
        """,
        "bug": ("queue.popleft()", "queue.pop()"),
        "bug_type": "function misuse",
        "test": """
            class GraphNode:
                def __init__(self, name):
                    self.name = name
                    self.edges = []

                def __repr__(self):
                    return f"GraphNode({self.name!r})"


            def check(bfs_order):
                a, b, c, d, e = (GraphNode(n) for n in "abcde")
                a.edges = [b, c]
                b.edges = [d]
                c.edges = [a, e]
                d.edges = [b]
                order = bfs_order(a)
                assert [n.name for n in order] == ["a", "b", "c", "d", "e"]
                assert order[0] is a and order[3] is d
                assert all(x is y for x, y in zip(order, [a, b, c, d, e]))
                assert [n.name for n in bfs_order(d)] == ["d", "b"]
                ring = [GraphNode(i) for i in range(5)]
                for i, n in enumerate(ring):
                    n.edges = [ring[(i + 1) % 5]]
                assert [n.name for n in bfs_order(ring[2])] == [2, 3, 4, 0, 1]
                lone = GraphNode("x")
                lone.edges = [lone]
                assert bfs_order(lone) == [lone]
                assert c.edges[0] is a and len(c.edges) == 2
        """,
    },
    {
        "case": "tree class defined INSIDE `check`; nodes passed in, one of them returned (`is`)",
        "bug_note": "`or` instead of `and` in the go-right test",
        "sig": "def lowest_common_ancestor(root, a, b):",
        "doc": """
            root is a binary search tree whose nodes have `key`, `left` and `right`; a and b are
            nodes of that tree. Return the node that is their lowest common ancestor (a node
            counts as an ancestor of itself).
        """,
        "body": """
            node = root
            while node is not None:
                if a.key < node.key and b.key < node.key:
                    node = node.left
                elif a.key > node.key and b.key > node.key:
                    node = node.right
                else:
                    return node
            return None
        """,
        "bug": ("a.key > node.key and b.key", "a.key > node.key or b.key"),
        "bug_type": "operator misuse",
        "test": """
            def check(lowest_common_ancestor):
                class TreeNode:
                    def __init__(self, key):
                        self.key = key
                        self.left = None
                        self.right = None

                def insert(root, key):
                    node = root
                    while True:
                        side = "left" if key < node.key else "right"
                        child = getattr(node, side)
                        if child is None:
                            setattr(node, side, TreeNode(key))
                            return getattr(node, side)
                        node = child

                root = TreeNode(50)
                nodes = {50: root}
                for k in [30, 70, 20, 40, 60, 80, 35, 45, 65]:
                    nodes[k] = insert(root, k)
                lca = lowest_common_ancestor
                assert lca(root, nodes[20], nodes[40]) is nodes[30]
                assert lca(root, nodes[35], nodes[45]) is nodes[40]
                assert lca(root, nodes[35], nodes[65]) is root
                assert lca(root, nodes[60], nodes[80]) is nodes[70]
                assert lca(root, nodes[30], nodes[45]) is nodes[30]
                assert lca(root, nodes[65], nodes[65]) is nodes[65]
                assert lca(nodes[30], nodes[20], nodes[35]) is nodes[30]
                assert isinstance(lca(root, nodes[20], nodes[80]), TreeNode)
                assert nodes[40].left is nodes[35]
        """,
    },
    {
        "case": "test-defined classes (a subclass too) whose methods the function calls; returns one of "
                "the objects passed (`is`, `type(...) is`)",
        "bug_note": "`>=` instead of `>`: the last of equal areas wins",
        "sig": "def largest_shape(shapes):",
        "doc": """
            Return the shape with the largest area(), the first one when several share the
            largest area; None for an empty list.
        """,
        "body": """
            best = None
            for shape in shapes:
                if best is None or shape.area() > best.area():
                    best = shape
            return best
        """,
        "bug": ("shape.area() > best.area()", "shape.area() >= best.area()"),
        "bug_type": "operator misuse",
        "test": """
            class Rect:
                def __init__(self, w, h):
                    self.w, self.h = w, h

                def area(self):
                    return self.w * self.h


            class Square(Rect):
                def __init__(self, side):
                    super().__init__(side, side)


            def check(largest_shape):
                r, s, t = Rect(2, 8), Square(4), Rect(3, 3)
                assert largest_shape([t, r, s]) is r
                assert largest_shape([s, r, t]) is s
                assert largest_shape([t]) is t
                assert largest_shape([]) is None
                big = Square(10)
                assert largest_shape([t, big, r]) is big
                assert type(largest_shape([s, t])) is Square
                assert largest_shape([Rect(1, 5), Rect(5, 1)]).w == 1
        """,
    },
    # ---------------------------------------------------------------- classes the reference code defines
    {
        "case": "module-level frozen `@dataclass Point` (reference helper): passed in, returned, compared with "
                "`==` to `Point(...)`, hashed, `repr`",
        "bug_note": "`a.y + b.x` instead of `a.y + b.y`",
        "imports": "from dataclasses import dataclass",
        "helpers": """
            @dataclass(frozen=True)
            class Point:
                x: float
                y: float
        """,
        "sig": "def midpoint(a: Point, b: Point) -> Point:",
        "doc": """
            Return the Point halfway between a and b.
            >>> midpoint(Point(0, 0), Point(2, 4))
            Point(x=1.0, y=2.0)
        """,
        "body": """
            return Point((a.x + b.x) / 2, (a.y + b.y) / 2)
        """,
        "bug": ("(a.y + b.y)", "(a.y + b.x)"),
        "bug_type": "variable misuse",
        "test": """
            def check(midpoint):
                assert midpoint(Point(0, 0), Point(2, 4)) == Point(1, 2)
                assert midpoint(Point(-3, 5), Point(3, 1)) == Point(0.0, 3.0)
                m = midpoint(Point(1, 1), Point(1, 1))
                assert m == Point(1, 1) and isinstance(m, Point)
                assert {midpoint(Point(0, 0), Point(0, 2))} == {Point(0, 1)}
                assert midpoint(Point(0, 0), Point(1, 3)).y == 1.5
                assert repr(midpoint(Point(0, 0), Point(2, 2))) == "Point(x=1.0, y=1.0)"
                assert midpoint(Point(0, 0), Point(4, 0)) != Point(2, 1)
        """,
    },
    {
        "case": "module-level namedtuple `Interval` (reference helper): passed in, returned, compared to "
                "`Interval(...)` and to plain tuples, `_asdict()`",
        "bug_note": "`<` instead of `<=`: touching intervals are not merged",
        "imports": "from collections import namedtuple\nfrom typing import List",
        "helpers": """
            Interval = namedtuple("Interval", ["start", "end"])
        """,
        "sig": "def merge_intervals(intervals: List[Interval]) -> List[Interval]:",
        "doc": """
            Merge intervals that overlap or touch (end == next start) and return the result
            sorted by start, as Interval tuples.
        """,
        "body": """
            merged = []
            for iv in sorted(intervals):
                if merged and iv.start <= merged[-1].end:
                    last = merged[-1]
                    merged[-1] = Interval(last.start, max(last.end, iv.end))
                else:
                    merged.append(iv)
            return merged
        """,
        "bug": ("iv.start <= merged[-1].end", "iv.start < merged[-1].end"),
        "bug_type": "operator misuse",
        "test": """
            def check(merge_intervals):
                got = merge_intervals([Interval(5, 8), Interval(1, 3), Interval(2, 4)])
                assert got == [Interval(1, 4), Interval(5, 8)]
                assert got[0].end == 4 and type(got[0]) is Interval
                assert merge_intervals([Interval(1, 2), Interval(2, 3)]) == [(1, 3)]
                assert merge_intervals([]) == []
                assert merge_intervals([Interval(1, 10), Interval(2, 3)]) == [Interval(1, 10)]
                assert merge_intervals([Interval(0, 0)]) == [Interval(0, 0)]
                assert merge_intervals([Interval(3, 4), Interval(1, 2)])[1]._asdict() == {"start": 3, "end": 4}
        """,
    },
    {
        "case": "module-level Enum `Light` (reference helper): members passed in and returned, compared with `is`",
        "bug_note": "`% (len(order) - 1)`: YELLOW goes back to GREEN",
        "imports": "from enum import Enum",
        "helpers": """
            class Light(Enum):
                RED = "red"
                GREEN = "green"
                YELLOW = "yellow"
        """,
        "sig": "def next_light(current: Light) -> Light:",
        "doc": """
            Return the light that follows current: RED -> GREEN -> YELLOW -> RED.
        """,
        "body": """
            order = [Light.RED, Light.GREEN, Light.YELLOW]
            return order[(order.index(current) + 1) % len(order)]
        """,
        "bug": ("% len(order)", "% (len(order) - 1)"),
        "bug_type": "value misuse",
        "test": """
            def check(next_light):
                assert next_light(Light.RED) is Light.GREEN
                assert next_light(Light.GREEN) is Light.YELLOW
                assert next_light(Light.YELLOW) is Light.RED
                assert next_light(Light("red")).value == "green"
                seq = [Light.RED]
                for _ in range(6):
                    seq.append(next_light(seq[-1]))
                assert [light.name for light in seq] == ["RED", "GREEN", "YELLOW", "RED", "GREEN", "YELLOW", "RED"]
                assert isinstance(next_light(Light.GREEN), Light)
        """,
    },
    {
        "case": "reference-defined node class; the function builds and returns a CYCLIC structure (a ring)",
        "bug_note": "the last node links to `head.next` instead of `head`",
        "helpers": """
            class RingNode:
                def __init__(self, value):
                    self.value = value
                    self.next = None
        """,
        "sig": "def make_ring(values: list) -> RingNode:",
        "doc": """
            Build a circular linked list of RingNode objects holding values in order, whose last
            node links back to the first, and return the first node (None for no values).
        """,
        "body": """
            if not values:
                return None
            head = RingNode(values[0])
            tail = head
            for v in values[1:]:
                tail.next = RingNode(v)
                tail = tail.next
            tail.next = head
            return head
        """,
        "bug": ("tail.next = head\n", "tail.next = head.next\n"),
        "bug_type": "variable misuse",
        "test": """
            def check(make_ring):
                head = make_ring([1, 2, 3])
                assert isinstance(head, RingNode)
                assert [head.value, head.next.value, head.next.next.value] == [1, 2, 3]
                assert head.next.next.next is head
                one = make_ring(["x"])
                assert one.next is one
                assert make_ring([]) is None
                big = make_ring(list(range(50)))
                node, seen = big, []
                for _ in range(50):
                    seen.append(node.value)
                    node = node.next
                assert seen == list(range(50)) and node is big
        """,
    },
    # ---------------------------------------------------------------- standard-library value types
    {
        "case": "`collections.defaultdict(list)` returned: type, `default_factory`, missing key gives `[]`",
        "bug_note": "`groups[len(w)] = [w]` overwrites instead of appending",
        "imports": "from collections import defaultdict\nfrom typing import DefaultDict, List",
        "sig": "def group_by_length(words: List[str]) -> DefaultDict[int, List[str]]:",
        "doc": """
            Group words by length, keeping input order inside each group. Return a
            defaultdict(list), so that a length with no words gives an empty list.
        """,
        "body": """
            groups = defaultdict(list)
            for w in words:
                groups[len(w)].append(w)
            return groups
        """,
        "bug": ("groups[len(w)].append(w)", "groups[len(w)] = [w]"),
        "bug_type": "missing logic",
        "test": """
            from collections import defaultdict


            def check(group_by_length):
                g = group_by_length(["aa", "b", "cc", "ddd", "e"])
                assert g == {2: ["aa", "cc"], 1: ["b", "e"], 3: ["ddd"]}
                assert isinstance(g, defaultdict)
                assert g.default_factory is list
                assert g[7] == [] and 7 in g
                g[1].append("z")
                assert g[1] == ["b", "e", "z"]
                assert group_by_length([]) == {}
                assert list(group_by_length(["xyz", "a"]).keys()) == [3, 1]
        """,
    },
    {
        "case": "`collections.Counter` returned: `most_common`, missing key is 0, `+` of two results",
        "bug_note": "`isalnum()` instead of `isalpha()`: digits are counted",
        "imports": "from collections import Counter",
        "sig": "def letter_counts(text: str) -> Counter:",
        "doc": """
            Count the letters of text case-insensitively (as lower case); other characters are
            ignored. Return a Counter.
        """,
        "body": """
            return Counter(ch.lower() for ch in text if ch.isalpha())
        """,
        "bug": ("ch.isalpha()", "ch.isalnum()"),
        "bug_type": "function misuse",
        "test": """
            from collections import Counter


            def check(letter_counts):
                c = letter_counts("Hello, World 42!")
                assert c == Counter({"l": 3, "o": 2, "h": 1, "e": 1, "w": 1, "r": 1, "d": 1})
                assert isinstance(c, Counter)
                assert c["z"] == 0
                assert c.most_common(2) == [("l", 3), ("o", 2)]
                assert sum(c.values()) == 10
                assert letter_counts("AaA") + letter_counts("a") == Counter(a=4)
                assert letter_counts("123 ...") == Counter()
        """,
    },
    {
        "case": "`collections.OrderedDict` returned: order-sensitive `==` against another OrderedDict, "
                "`move_to_end` on the result",
        "bug_note": "missing `cache.move_to_end(key)` on a hit",
        "imports": "from collections import OrderedDict",
        "sig": "def lru_cache_state(accesses: list, capacity: int) -> OrderedDict:",
        "doc": """
            Simulate an LRU cache of the given capacity over the accessed keys. The cache maps
            each key to how many times it was accessed since it last entered the cache. Return
            it as an OrderedDict from least to most recently used.
        """,
        "body": """
            cache = OrderedDict()
            for key in accesses:
                if key in cache:
                    cache[key] += 1
                    cache.move_to_end(key)
                else:
                    cache[key] = 1
                    if len(cache) > capacity:
                        cache.popitem(last=False)
            return cache
        """,
        "bug": ("            cache.move_to_end(key)\n", ""),
        "bug_type": "missing logic",
        "test": """
            from collections import OrderedDict


            def check(lru_cache_state):
                s = lru_cache_state(["a", "b", "a", "c", "d"], 3)
                assert isinstance(s, OrderedDict)
                assert list(s.items()) == [("a", 2), ("c", 1), ("d", 1)]
                assert s == OrderedDict([("a", 2), ("c", 1), ("d", 1)])
                assert s != OrderedDict([("c", 1), ("a", 2), ("d", 1)])
                assert next(reversed(s)) == "d"
                s.move_to_end("a")
                assert list(s) == ["c", "d", "a"]
                assert lru_cache_state([], 2) == OrderedDict()
                assert list(lru_cache_state([1, 2, 1, 3, 1, 4], 2)) == [1, 4]
        """,
    },
    {
        "case": "`collections.deque(maxlen=n)` returned: `maxlen` kept, appending to the result drops the oldest",
        "bug_note": "`appendleft` instead of `append`: newest first",
        "imports": "from collections import deque",
        "sig": "def recent_events(events, n: int) -> deque:",
        "doc": """
            Return a deque(maxlen=n) holding the last n events of the iterable, oldest first.
        """,
        "body": """
            window = deque(maxlen=n)
            for e in events:
                window.append(e)
            return window
        """,
        "bug": ("window.append(e)", "window.appendleft(e)"),
        "bug_type": "function misuse",
        "test": """
            from collections import deque


            def check(recent_events):
                d = recent_events([1, 2, 3, 4, 5], 3)
                assert isinstance(d, deque)
                assert d == deque([3, 4, 5])
                assert d.maxlen == 3
                d.append(6)
                assert list(d) == [4, 5, 6]
                assert recent_events("abc", 5) == deque(["a", "b", "c"])
                assert list(recent_events(iter(range(100)), 2)) == [98, 99]
                assert recent_events([], 4).maxlen == 4
                assert d[0] == 4 and d[-1] == 6
        """,
    },
    {
        "case": "namedtuples the TEST defines (`collections.namedtuple`) passed in; the same type returned via "
                "`_replace` (`type(r) is Vec`)",
        "bug_note": "`y=v.x * k` instead of `y=v.y * k`",
        "sig": "def scale_vector(v, k):",
        "doc": """
            v is a namedtuple with fields x and y (and maybe others). Return a namedtuple of the
            same type with x and y multiplied by k and every other field unchanged.
        """,
        "body": """
            return v._replace(x=v.x * k, y=v.y * k)
        """,
        "bug": ("y=v.y * k", "y=v.x * k"),
        "bug_type": "variable misuse",
        "test": """
            from collections import namedtuple

            Vec = namedtuple("Vec", "x y")
            Vec3 = namedtuple("Vec3", ["x", "y", "z"])


            def check(scale_vector):
                r = scale_vector(Vec(1, 2), 3)
                assert r == Vec(3, 6) and type(r) is Vec
                assert r.y == 6 and r == (3, 6)
                w = scale_vector(Vec3(1, -1, 7), 2)
                assert w == Vec3(2, -2, 7) and w.z == 7 and type(w) is Vec3
                assert scale_vector(Vec(0.5, 0.25), 4)._asdict() == {"x": 2.0, "y": 1.0}
                assert scale_vector(Vec(2, 3), 0) == Vec(0, 0)
        """,
    },
    {
        "case": "a namedtuple type of the standard library (`urllib.parse.SplitResult`, with methods) returned; "
                "compared to a plain tuple and to `urlsplit(...)`",
        "bug_note": "no `port is None` case: a URL without a port gets `:None`",
        "imports": "from urllib.parse import SplitResult, urlsplit",
        "sig": "def canonical_url(url: str) -> SplitResult:",
        "doc": """
            Parse url and return it as a SplitResult with the host in lower case, user
            information dropped, the scheme's default port (80 for http, 443 for https) left
            out, and an empty path replaced by "/".
        """,
        "body": """
            parts = urlsplit(url)
            host = parts.hostname or ""
            port = parts.port
            default = {"http": 80, "https": 443}.get(parts.scheme)
            netloc = host if port is None or port == default else f"{host}:{port}"
            return parts._replace(netloc=netloc, path=parts.path or "/")
        """,
        "bug": ("if port is None or port == default", "if port == default"),
        "bug_type": "missing logic",
        "test": """
            from urllib.parse import SplitResult, urlsplit


            def check(canonical_url):
                r = canonical_url("HTTPS://Example.COM:443/a?b=1#top")
                assert type(r) is SplitResult
                assert r == ("https", "example.com", "/a", "b=1", "top")
                assert r.geturl() == "https://example.com/a?b=1#top"
                assert canonical_url("https://Example.com").geturl() == "https://example.com/"
                assert canonical_url("http://host:8080").geturl() == "http://host:8080/"
                assert canonical_url("HTTP://user:pw@Host:80/x") == urlsplit("http://host/x")
                assert canonical_url("https://h:80/").port == 80
                assert canonical_url("ftp://files.example.org/pub").netloc == "files.example.org"
        """,
    },
    {
        "case": "`fractions.Fraction` returned (exact value, `numerator`, `str`)",
        "bug_note": "`range(1, n)`: the last term is left out",
        "imports": "from fractions import Fraction",
        "sig": "def harmonic(n: int) -> Fraction:",
        "doc": """
            Return the n-th harmonic number 1 + 1/2 + ... + 1/n as an exact Fraction
            (0 for n = 0).
        """,
        "body": """
            total = Fraction(0)
            for k in range(1, n + 1):
                total += Fraction(1, k)
            return total
        """,
        "bug": ("range(1, n + 1)", "range(1, n)"),
        "bug_type": "value misuse",
        "test": """
            from fractions import Fraction


            def check(harmonic):
                assert harmonic(1) == 1
                assert harmonic(4) == Fraction(25, 12)
                assert isinstance(harmonic(3), Fraction)
                assert harmonic(3).denominator == 6 and harmonic(3).numerator == 11
                assert harmonic(0) == 0
                assert str(harmonic(2)) == "3/2"
                assert harmonic(20) > 3
                assert harmonic(10) == Fraction(7381, 2520)
        """,
    },
    {
        "case": "`fractions.Fraction` passed in; a tuple `(int, Fraction)` returned",
        "bug_note": "floor division instead of truncation for negative values",
        "imports": "from fractions import Fraction\nfrom typing import Tuple",
        "sig": "def to_mixed(f: Fraction) -> Tuple[int, Fraction]:",
        "doc": """
            Split f into a whole number and a proper fraction with the same sign as f, so that
            whole + rest == f: to_mixed(Fraction(-7, 4)) == (-1, Fraction(-3, 4)).
        """,
        "body": """
            whole = int(f)
            return whole, f - whole
        """,
        "bug": ("whole = int(f)", "whole = f.numerator // f.denominator"),
        "bug_type": "function misuse",
        "test": """
            from fractions import Fraction


            def check(to_mixed):
                assert to_mixed(Fraction(7, 4)) == (1, Fraction(3, 4))
                assert to_mixed(Fraction(-7, 4)) == (-1, Fraction(-3, 4))
                w, r = to_mixed(Fraction(10, 5))
                assert (w, r) == (2, 0) and isinstance(r, Fraction)
                assert to_mixed(Fraction(1, 3)) == (0, Fraction(1, 3))
                assert to_mixed(Fraction(-1, 3)) == (0, Fraction(-1, 3))
                assert sum(to_mixed(Fraction(-22, 7))) == Fraction(-22, 7)
                assert type(to_mixed(Fraction(5, 2))[0]) is int
        """,
    },
    {
        "case": "`decimal.Decimal` passed in and returned (`str` keeps the exponent: `'100.00'`)",
        "bug_note": "`quantize` without `rounding=ROUND_HALF_UP` (banker's rounding)",
        "imports": "from decimal import ROUND_HALF_UP, Decimal",
        "sig": "def apply_discount(price: Decimal, percent: int) -> Decimal:",
        "doc": """
            Return price less percent per cent, rounded to cents with halves rounded up (away
            from zero).
        """,
        "body": """
            discounted = price * (Decimal(100) - Decimal(percent)) / Decimal(100)
            return discounted.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
        """,
        "bug": ('Decimal("0.01"), rounding=ROUND_HALF_UP)', 'Decimal("0.01"))'),
        "bug_type": "missing logic",
        "test": """
            from decimal import Decimal


            def check(apply_discount):
                assert apply_discount(Decimal("10.00"), 10) == Decimal("9.00")
                assert apply_discount(Decimal("1.25"), 10) == Decimal("1.13")
                r = apply_discount(Decimal("19.99"), 15)
                assert isinstance(r, Decimal) and str(r) == "16.99"
                assert apply_discount(Decimal("0.05"), 50) == Decimal("0.03")
                assert str(apply_discount(Decimal("100"), 0)) == "100.00"
                assert apply_discount(Decimal("3.30"), 100) == 0
                assert r.as_tuple().exponent == -2
        """,
    },
    {
        "case": "`datetime.date` passed in and returned (`type(r) is date`)",
        "bug_note": "`weekday() < 6`: Saturdays count as business days",
        "imports": "from datetime import date, timedelta",
        "sig": "def add_business_days(start: date, days: int) -> date:",
        "doc": """
            Return the date that is `days` business days (Monday to Friday) after start; days >= 0
            and start may fall on a weekend (0 days gives start itself).
        """,
        "body": """
            current = start
            while days > 0:
                current += timedelta(days=1)
                if current.weekday() < 5:
                    days -= 1
            return current
        """,
        "bug": ("weekday() < 5", "weekday() < 6"),
        "bug_type": "value misuse",
        "test": """
            from datetime import date


            def check(add_business_days):
                assert add_business_days(date(2024, 1, 5), 1) == date(2024, 1, 8)
                assert add_business_days(date(2024, 1, 1), 4) == date(2024, 1, 5)
                assert add_business_days(date(2024, 1, 1), 5) == date(2024, 1, 8)
                assert add_business_days(date(2024, 1, 6), 0) == date(2024, 1, 6)
                assert add_business_days(date(2024, 1, 6), 1) == date(2024, 1, 8)
                r = add_business_days(date(2024, 2, 28), 2)
                assert r == date(2024, 3, 1) and type(r) is date
                assert (add_business_days(date(2024, 1, 1), 10) - date(2024, 1, 1)).days == 14
                assert add_business_days(date(2023, 12, 29), 1).year == 2024
        """,
    },
    {
        "case": "`datetime.datetime` (naive and tz-aware) passed in; `datetime.timedelta` returned",
        "bug_note": "`max(end1, end2)` instead of `min(...)`",
        "imports": "from datetime import datetime, timedelta",
        "sig": "def overlap(start1: datetime, end1: datetime, start2: datetime, end2: datetime) -> timedelta:",
        "doc": """
            Return how long the periods [start1, end1) and [start2, end2) share, timedelta(0)
            when they do not overlap.
        """,
        "body": """
            latest_start = max(start1, start2)
            earliest_end = min(end1, end2)
            return max(earliest_end - latest_start, timedelta(0))
        """,
        "bug": ("min(end1, end2)", "max(end1, end2)"),
        "bug_type": "function misuse",
        "test": """
            from datetime import datetime, timedelta, timezone


            def check(overlap):
                d = datetime(2024, 3, 1, 9, 0)
                h = timedelta(hours=1)
                assert overlap(d, d + 2 * h, d + h, d + 3 * h) == h
                assert overlap(d, d + h, d + 2 * h, d + 3 * h) == timedelta(0)
                assert overlap(d, d + 4 * h, d + h, d + 2 * h) == h
                r = overlap(d, d + timedelta(minutes=90), d + timedelta(minutes=30), d + 5 * h)
                assert r == timedelta(minutes=60) and isinstance(r, timedelta) and r.total_seconds() == 3600
                cet = timezone(timedelta(hours=1))
                a = datetime(2024, 3, 1, 10, 0, tzinfo=cet)
                b = datetime(2024, 3, 1, 9, 30, tzinfo=timezone.utc)
                assert overlap(a, a + h, b, b + h) == timedelta(minutes=30)
                assert overlap(d, d, d, d + h) == timedelta(0)
        """,
    },
    {
        "case": "`datetime.datetime` returned, with a `timezone` tzinfo kept (`isoformat`)",
        "bug_note": "`<` instead of `<=`: an alarm at exactly now is not moved to tomorrow",
        "imports": "from datetime import datetime, timedelta",
        "sig": "def next_alarm(now: datetime, hour: int, minute: int) -> datetime:",
        "doc": """
            Return the first moment strictly after now whose clock reads hour:minute (seconds
            zero), in now's time zone.
        """,
        "body": """
            candidate = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
            if candidate <= now:
                candidate += timedelta(days=1)
            return candidate
        """,
        "bug": ("candidate <= now", "candidate < now"),
        "bug_type": "operator misuse",
        "test": """
            from datetime import datetime, timedelta, timezone


            def check(next_alarm):
                now = datetime(2024, 5, 1, 6, 30, 15)
                assert next_alarm(now, 7, 0) == datetime(2024, 5, 1, 7, 0)
                assert next_alarm(now, 6, 0) == datetime(2024, 5, 2, 6, 0)
                assert next_alarm(datetime(2024, 5, 1, 7, 0), 7, 0) == datetime(2024, 5, 2, 7, 0)
                assert next_alarm(datetime(2024, 12, 31, 23, 59), 0, 0) == datetime(2025, 1, 1, 0, 0)
                tz = timezone(timedelta(hours=-5))
                r = next_alarm(datetime(2024, 5, 1, 8, 0, tzinfo=tz), 9, 15)
                assert r.tzinfo == tz and r.isoformat() == "2024-05-01T09:15:00-05:00"
                assert type(r) is datetime
        """,
    },
    {
        "case": "`set` and `frozenset` passed in (a dict of them); a `frozenset` returned and used as a dict key",
        "bug_note": "person is not removed from their own suggestions",
        "imports": "from typing import Dict, FrozenSet, Set, Union",
        "sig": "def friend_suggestions(friends: Dict[str, Union[Set[str], FrozenSet[str]]], person: str) "
               "-> FrozenSet[str]:",
        "doc": """
            Return the friends of person's friends who are neither person nor already person's
            friends. friends maps each name to a set (or frozenset) of names.
        """,
        "body": """
            direct = friends.get(person, frozenset())
            found = set()
            for f in direct:
                found |= friends.get(f, frozenset())
            return frozenset(found - direct - {person})
        """,
        "bug": ("found - direct - {person}", "found - direct"),
        "bug_type": "missing logic",
        "test": """
            def check(friend_suggestions):
                g = {"ann": frozenset({"bob", "cid"}), "bob": frozenset({"ann", "dan"}),
                     "cid": frozenset({"ann", "dan", "eve"}), "dan": frozenset({"bob", "cid"}),
                     "eve": frozenset({"cid"})}
                s = friend_suggestions(g, "ann")
                assert s == {"dan", "eve"} and isinstance(s, frozenset)
                assert {s: "ann"}[frozenset({"eve", "dan"})] == "ann"
                assert friend_suggestions(g, "eve") == {"ann", "dan"}
                assert friend_suggestions(g, "zed") == frozenset()
                assert friend_suggestions({"a": {"b"}, "b": {"a", "c"}, "c": {"b"}}, "a") == {"c"}
                assert g["ann"] == frozenset({"bob", "cid"}) and type(g["ann"]) is frozenset
                assert friend_suggestions({"a": set()}, "a") == set()
        """,
    },
    {
        "case": "`bytes` (and a `bytearray`) passed in; `bytes` returned",
        "bug_note": "`(block_size - len(data)) % block_size`: no padding block for a full last block",
        "sig": "def pkcs7_pad(data: bytes, block_size: int) -> bytes:",
        "doc": """
            Pad data to a multiple of block_size the PKCS#7 way: append n bytes of value n,
            1 <= n <= block_size (a full block when data is already a multiple).
        """,
        "body": """
            n = block_size - len(data) % block_size
            return data + bytes([n]) * n
        """,
        "bug": ("n = block_size - len(data) % block_size", "n = (block_size - len(data)) % block_size"),
        "bug_type": "operator misuse",
        "test": r"""
            def check(pkcs7_pad):
                assert pkcs7_pad(b"attack at dawn", 16) == b"attack at dawn\x02\x02"
                assert pkcs7_pad(b"", 4) == b"\x04\x04\x04\x04"
                assert pkcs7_pad(b"abcd", 4) == b"abcd\x04\x04\x04\x04"
                r = pkcs7_pad(bytes(range(250, 256)), 8)
                assert r == bytes([250, 251, 252, 253, 254, 255, 2, 2]) and isinstance(r, bytes)
                assert len(pkcs7_pad(b"x" * 1000, 16)) == 1008
                assert pkcs7_pad(b"\x00", 2)[-1] == 1
                assert pkcs7_pad(bytearray(b"ab"), 3) == b"ab\x01"
        """,
    },
    {
        "case": "`complex` passed in and returned (a tuple of two)",
        "bug_note": "`/ 2 * a` instead of `/ (2 * a)`",
        "imports": "import cmath\nfrom typing import Tuple",
        "sig": "def quadratic_roots(a: complex, b: complex, c: complex) -> Tuple[complex, complex]:",
        "doc": """
            Return both roots of a*x**2 + b*x + c = 0 (a != 0) as complex numbers, the root with
            + sqrt(discriminant) first.
        """,
        "body": """
            d = cmath.sqrt(b * b - 4 * a * c)
            return (-b + d) / (2 * a), (-b - d) / (2 * a)
        """,
        "bug": ("return (-b + d) / (2 * a), (-b - d) / (2 * a)", "return (-b + d) / 2 * a, (-b - d) / 2 * a"),
        "bug_type": "operator misuse",
        "test": """
            def check(quadratic_roots):
                assert quadratic_roots(1, 0, 1) == (1j, -1j)
                r1, r2 = quadratic_roots(2, -6, 4)
                assert r1 == 2 and r2 == 1 and isinstance(r1, complex)
                z1, z2 = quadratic_roots(2, 2, 1)
                assert z1 == complex(-0.5, 0.5) and z2 == z1.conjugate()
                assert abs(quadratic_roots(1, -2, 1)[0] - 1) < 1e-12
                assert quadratic_roots(4, 0, -16) == (2, -2)
                assert quadratic_roots(1, -3j, -2) == (2j, 1j)
                assert all(abs(2 * z * z + 2 * z + 1) < 1e-12 for z in quadratic_roots(2, 2, 1))
        """,
    },
    {
        "case": "big ints returned (Fibonacci numbers far above 2**200)",
        "bug_note": "starts from `1, 1`: every value shifted by one",
        "sig": "def fib(n: int) -> int:",
        "doc": """
            Return the n-th Fibonacci number, exactly: fib(0) = 0, fib(1) = 1.
        """,
        "body": """
            a, b = 0, 1
            for _ in range(n):
                a, b = b, a + b
            return a
        """,
        "bug": ("a, b = 0, 1", "a, b = 1, 1"),
        "bug_type": "value misuse",
        "test": """
            def check(fib):
                assert fib(0) == 0 and fib(1) == 1 and fib(2) == 1
                assert fib(10) == 55
                assert fib(300) == 222232244629420445529739893461909967206666939096499764990979600
                assert fib(300) > 2 ** 200
                big = fib(1000)
                assert big.bit_length() == 694 and big % 1000 == 875
                assert fib(500) * fib(502) - fib(501) ** 2 == -1
                assert type(big) is int
        """,
    },
    {
        "case": "big ints passed in and returned (integer square roots of 600-bit numbers)",
        "bug_note": "`n / x` (float division) instead of `n // x`",
        "sig": "def int_sqrt(n: int) -> int:",
        "doc": """
            Return the largest integer r with r * r <= n, for any int n >= 0, exactly (also for
            numbers with hundreds of digits).
        """,
        "body": """
            if n < 2:
                return n
            x = n
            y = (x + 1) // 2
            while y < x:
                x = y
                y = (x + n // x) // 2
            return x
        """,
        "bug": ("(x + n // x)", "(x + n / x)"),
        "bug_type": "operator misuse",
        "test": """
            def check(int_sqrt):
                assert int_sqrt(0) == 0 and int_sqrt(1) == 1
                assert int_sqrt(15) == 3 and int_sqrt(16) == 4
                big = 3 ** 300
                assert int_sqrt(big * big) == big
                assert int_sqrt(big * big - 1) == big - 1
                r = int_sqrt(2 ** 401)
                assert r * r <= 2 ** 401 < (r + 1) ** 2
                assert int_sqrt(10 ** 250) == 10 ** 125
                assert isinstance(int_sqrt(2 ** 300), int)
        """,
    },
    {
        "case": "`inf`, `-inf` and `nan` returned (the test uses `math.isnan`, `== math.inf`, `r != r`)",
        "bug_note": "`copysign(math.inf, b)` instead of `a`",
        "imports": "import math",
        "sig": "def safe_ratio(a: float, b: float) -> float:",
        "doc": """
            Return a / b, except that dividing by zero gives inf or -inf by the sign of a, and
            nan for 0 / 0.
        """,
        "body": """
            if b == 0:
                if a == 0:
                    return math.nan
                return math.copysign(math.inf, a)
            return a / b
        """,
        "bug": ("math.copysign(math.inf, a)", "math.copysign(math.inf, b)"),
        "bug_type": "variable misuse",
        "test": """
            import math


            def check(safe_ratio):
                assert safe_ratio(6, 3) == 2
                assert safe_ratio(1, 0) == math.inf
                assert safe_ratio(-2.5, 0) == -math.inf
                assert math.isnan(safe_ratio(0, 0))
                r = safe_ratio(0.0, 0.0)
                assert r != r
                assert safe_ratio(math.inf, 2) == math.inf
                assert math.isinf(safe_ratio(3, 0.0)) and safe_ratio(3, 0.0) > 0
                assert math.isnan(safe_ratio(math.nan, 4))
        """,
    },
    {
        "case": "`nan` and `inf` passed in (inside a list)",
        "bug_note": "`v is not math.nan` instead of `not math.isnan(v)`",
        "imports": "import math\nfrom typing import List",
        "sig": "def nan_mean(values: List[float]) -> float:",
        "doc": """
            Return the mean of the values that are not nan; nan when no such value is left.
        """,
        "body": """
            kept = [v for v in values if not math.isnan(v)]
            if not kept:
                return math.nan
            return sum(kept) / len(kept)
        """,
        "bug": ("not math.isnan(v)", "v is not math.nan"),
        "bug_type": "function misuse",
        "test": """
            import math


            def check(nan_mean):
                nan = float("nan")
                assert nan_mean([1.0, nan, 3.0]) == 2.0
                assert nan_mean([2.0, 4.0]) == 3.0
                assert math.isnan(nan_mean([nan, nan]))
                assert math.isnan(nan_mean([]))
                assert nan_mean([math.inf, 1.0, nan]) == math.inf
                assert nan_mean([float("nan"), -1.0]) == -1.0
                assert nan_mean([0.5] * 4 + [float("nan")]) == 0.5
        """,
    },
    # ---------------------------------------------------------------- arguments mutated in place
    {
        "case": "a list sorted IN PLACE (returns None; the test checks its own list, aliases, and objects of a "
                "test class whose `__gt__` the function calls)",
        "bug_note": "`while j > 0` instead of `j >= 0`: the first slot is never written",
        "sig": "def insertion_sort(items: list) -> None:",
        "doc": """
            Sort items in place in ascending order (stable) using insertion sort; return None.
            Items only need to support `>`.
        """,
        "body": """
            for i in range(1, len(items)):
                current = items[i]
                j = i - 1
                while j >= 0 and items[j] > current:
                    items[j + 1] = items[j]
                    j -= 1
                items[j + 1] = current
        """,
        "bug": ("while j >= 0 and", "while j > 0 and"),
        "bug_type": "value misuse",
        "test": """
            class Version:
                def __init__(self, text):
                    self.parts = tuple(int(p) for p in text.split("."))

                def __gt__(self, other):
                    return self.parts > other.parts


            def check(insertion_sort):
                xs = [5, 2, 9, 1, 5, 6]
                assert insertion_sort(xs) is None
                assert xs == [1, 2, 5, 5, 6, 9]
                ys = []
                insertion_sort(ys)
                assert ys == []
                words = ["pear", "apple", "fig"]
                alias = words
                insertion_sort(words)
                assert alias == ["apple", "fig", "pear"] and alias is words
                pairs = [(2, "b"), (1, "z"), (2, "a"), (1, "y")]
                insertion_sort(pairs)
                assert pairs == [(1, "y"), (1, "z"), (2, "a"), (2, "b")]
                vs = [Version("1.10"), Version("1.2"), Version("0.9")]
                keep = list(vs)
                insertion_sort(vs)
                assert [v.parts for v in vs] == [(0, 9), (1, 2), (1, 10)] and vs[0] is keep[2]
                data = list(range(200, 0, -1))
                insertion_sort(data)
                assert data == list(range(1, 201))
        """,
    },
    {
        "case": "a dict of lists appended to IN PLACE (also a `defaultdict` the test passes; the test keeps a "
                "reference to an inner list)",
        "bug_note": "copy-paste slip: `graph[v].append(v)` instead of `append(u)`",
        "imports": "from typing import Dict, Hashable, List",
        "sig": "def add_edge(graph: Dict[Hashable, List[Hashable]], u: Hashable, v: Hashable) -> None:",
        "doc": """
            Add the undirected edge u-v to the adjacency lists in graph, in place: v goes into
            graph[u] and u into graph[v], creating missing lists. An edge already present is not
            added twice. Return None.
        """,
        "body": """
            if v not in graph.setdefault(u, []):
                graph[u].append(v)
            if u not in graph.setdefault(v, []):
                graph[v].append(u)
        """,
        "bug": ("graph[v].append(u)", "graph[v].append(v)"),
        "bug_type": "variable misuse",
        "test": """
            from collections import defaultdict


            def check(add_edge):
                g = {}
                assert add_edge(g, "a", "b") is None
                assert g == {"a": ["b"], "b": ["a"]}
                add_edge(g, "a", "c")
                add_edge(g, "b", "a")
                assert g == {"a": ["b", "c"], "b": ["a"], "c": ["a"]}
                existing = g["a"]
                add_edge(g, "a", "d")
                assert existing == ["b", "c", "d"] and g["a"] is existing
                g2 = {"x": []}
                add_edge(g2, "x", "x")
                assert g2 == {"x": ["x"]}
                dg = defaultdict(list)
                add_edge(dg, 1, 2)
                assert dg == {1: [2], 2: [1]} and isinstance(dg, defaultdict)
                assert sorted(g) == ["a", "b", "c", "d"]
        """,
    },
    {
        "case": "a test-defined linked list REWIRED in place (the test walks its own nodes); the new head "
                "returned (`is`)",
        "bug_note": "`return head` instead of `return prev`",
        "sig": "def reverse_list(head):",
        "doc": """
            Reverse the singly linked list that starts at head in place, by relinking its nodes
            (`next` attributes; no new nodes), and return the new head.
        """,
        "body": """
            prev = None
            node = head
            while node is not None:
                nxt = node.next
                node.next = prev
                prev = node
                node = nxt
            return prev
        """,
        "bug": ("return prev", "return head"),
        "bug_type": "variable misuse",
        "test": """
            class ListNode:
                def __init__(self, val, next=None):
                    self.val = val
                    self.next = next


            def check(reverse_list):
                nodes = [ListNode(i) for i in range(5)]
                for a, b in zip(nodes, nodes[1:]):
                    a.next = b
                new_head = reverse_list(nodes[0])
                assert nodes[0].next is None
                for i in range(1, 5):
                    assert nodes[i].next is nodes[i - 1]
                assert new_head is nodes[4]
                single = ListNode("s")
                assert reverse_list(single) is single and single.next is None
                assert reverse_list(None) is None
                back = reverse_list(new_head)
                assert back is nodes[0] and [n.next for n in nodes[:4]] == nodes[1:]
        """,
    },
    # ---------------------------------------------------------------- generators and iterators
    {
        "case": "a finite generator returned (`iter(g) is g`, `next`, `list`, `StopIteration`, `next(g, default)`)",
        "bug_note": "`range(0, len(seq) - size + 1, size)`: the short last chunk is dropped",
        "imports": "from typing import Iterator, List, Sequence",
        "sig": "def chunks(seq: Sequence, size: int) -> Iterator[List]:",
        "doc": """
            Yield successive lists of size items from seq; the last one may be shorter.
        """,
        "body": """
            for start in range(0, len(seq), size):
                yield list(seq[start:start + size])
        """,
        "bug": ("range(0, len(seq), size)", "range(0, len(seq) - size + 1, size)"),
        "bug_type": "value misuse",
        "test": """
            def check(chunks):
                g = chunks([1, 2, 3, 4, 5], 2)
                assert iter(g) is g
                assert next(g) == [1, 2]
                assert list(g) == [[3, 4], [5]]
                assert next(g, "done") == "done"
                assert list(chunks("abcdef", 3)) == [["a", "b", "c"], ["d", "e", "f"]]
                assert list(chunks([], 4)) == []
                assert [len(c) for c in chunks(range(10), 4)] == [4, 4, 2]
                try:
                    next(chunks([], 1))
                    raise AssertionError("expected StopIteration")
                except StopIteration:
                    pass
        """,
    },
    {
        "case": "an INFINITE generator returned; the test only slices it with `itertools.islice` and `next`",
        "bug_note": "`range(2, math.isqrt(n))`: 4, 9, 25, ... come out as primes",
        "imports": "import math\nfrom typing import Iterator",
        "sig": "def primes() -> Iterator[int]:",
        "doc": """
            Yield the prime numbers 2, 3, 5, 7, 11, ... without end.
        """,
        "body": """
            n = 2
            while True:
                if all(n % d for d in range(2, math.isqrt(n) + 1)):
                    yield n
                n += 1
        """,
        "bug": ("math.isqrt(n) + 1", "math.isqrt(n)"),
        "bug_type": "value misuse",
        "test": """
            from itertools import islice


            def check(primes):
                assert list(islice(primes(), 10)) == [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]
                g = primes()
                assert next(g) == 2 and next(g) == 3
                assert list(islice(g, 3)) == [5, 7, 11]
                assert next(g) == 13
                assert list(islice(primes(), 999, 1000)) == [7919]
                assert sum(islice(primes(), 100)) == 24133
                h = primes()
                assert [next(h) for _ in range(5)] == [2, 3, 5, 7, 11]
        """,
    },
    {
        "case": "an iterator the TEST passes (a list iterator, a generator of the test, an endless generator); "
                "the test checks how far its own iterator was consumed",
        "bug_note": "`seen = {item}` instead of `seen.add(item)`: only adjacent repeats are found",
        "imports": "from typing import Any, Iterable, Optional",
        "sig": "def first_repeat(items: Iterable[Any]) -> Optional[Any]:",
        "doc": """
            Return the first item that equals an earlier item, consuming the iterable only up to
            that item; None when no item repeats.
        """,
        "body": """
            seen = set()
            for item in items:
                if item in seen:
                    return item
                seen.add(item)
            return None
        """,
        "bug": ("seen.add(item)", "seen = {item}"),
        "bug_type": "function misuse",
        "test": """
            def check(first_repeat):
                it = iter([3, 1, 4, 1, 5, 9, 2, 6])
                assert first_repeat(it) == 1
                assert next(it) == 5
                assert first_repeat([1, 2, 3]) is None
                assert first_repeat("abca") == "a"

                def endless():
                    n = 0
                    while True:
                        yield n % 7
                        n += 1

                assert first_repeat(endless()) == 0
                gen = (x * x for x in [-2, 1, 2, 3])
                assert first_repeat(gen) == 4 and list(gen) == [9]
                assert first_repeat(iter([])) is None
        """,
    },
    {
        "case": "an endless iterator the test passes (`itertools.count`) AND an endless generator returned; "
                "the test checks how much of its source was taken",
        "bug_note": "yields the total before adding the current number",
        "imports": "from typing import Iterable, Iterator",
        "sig": "def running_total(numbers: Iterable[float]) -> Iterator[float]:",
        "doc": """
            Lazily yield the running sums of numbers (also for endless inputs): for 1, 2, 3 it
            yields 1, 3, 6. It takes an item from numbers only when the next sum is asked for.
        """,
        "body": """
            total = 0
            for x in numbers:
                total += x
                yield total
        """,
        "bug": ("total += x\n        yield total", "yield total\n        total += x"),
        "bug_type": "excess logic",
        "test": """
            from itertools import count, islice


            def check(running_total):
                assert list(running_total([1, 2, 3])) == [1, 3, 6]
                assert list(islice(running_total(count(1)), 5)) == [1, 3, 6, 10, 15]
                src = count(10, 10)
                g = running_total(src)
                assert next(g) == 10 and next(g) == 30
                assert next(src) == 30
                assert list(running_total([])) == []
                assert list(islice(running_total(iter([0.5] * 100)), 2, 4)) == [1.5, 2.0]
        """,
    },
    # ---------------------------------------------------------------- exceptions with their real type
    {
        "case": "`json.JSONDecodeError` raised, caught by the test with `except ValueError` (`e.pos`, "
                "`e.lineno`); a `TypeError` with a message; a module constant used by the test",
        "bug_note": "`{**data, **DEFAULTS}`: the defaults override the user's settings",
        "imports": "import json\nfrom typing import Any, Dict",
        "helpers": """
            DEFAULTS = {"theme": "light", "font_size": 12, "autosave": True}
        """,
        "sig": "def load_settings(text: str) -> Dict[str, Any]:",
        "doc": """
            Parse a JSON object of settings and fill in DEFAULTS for the keys it lacks. Invalid
            JSON raises json.JSONDecodeError (a ValueError); valid JSON that is not an object
            raises TypeError naming its type.
        """,
        "body": """
            data = json.loads(text)
            if not isinstance(data, dict):
                raise TypeError(f"settings must be a JSON object, not {type(data).__name__}")
            return {**DEFAULTS, **data}
        """,
        "bug": ("{**DEFAULTS, **data}", "{**data, **DEFAULTS}"),
        "bug_type": "variable misuse",
        "test": """
            import json


            def check(load_settings):
                assert load_settings('{"theme": "dark"}') == {"theme": "dark", "font_size": 12, "autosave": True}
                assert load_settings("{}") == DEFAULTS
                try:
                    load_settings('{"theme": ')
                    raise AssertionError("no error for broken JSON")
                except ValueError as e:
                    assert isinstance(e, json.JSONDecodeError)
                    assert e.pos == 10 and e.lineno == 1
                try:
                    load_settings("[1, 2]")
                    raise AssertionError("no error for a list")
                except TypeError as e:
                    assert "list" in str(e)
                s = load_settings('{"font_size": 14, "extra": null}')
                assert s["font_size"] == 14 and s["extra"] is None
                assert DEFAULTS["theme"] == "light"
        """,
    },
    {
        "case": "an exception class the REFERENCE code defines (custom `__init__`, an attribute), caught by "
                "that class; a `ValueError` with a message",
        "bug_note": "`>=` instead of `>`: withdrawing the whole balance is refused",
        "helpers": """
            class InsufficientFunds(Exception):
                \"\"\"Raised when a balance cannot cover a withdrawal.\"\"\"

                def __init__(self, balance: int, amount: int) -> None:
                    super().__init__(f"cannot withdraw {amount} from a balance of {balance}")
                    self.shortfall = amount - balance
        """,
        "sig": "def withdraw(balance: int, amount: int) -> int:",
        "doc": """
            Return the balance left after withdrawing amount. Raise ValueError when amount is not
            positive, and InsufficientFunds when amount is more than the balance.
        """,
        "body": """
            if amount <= 0:
                raise ValueError("amount must be positive")
            if amount > balance:
                raise InsufficientFunds(balance, amount)
            return balance - amount
        """,
        "bug": ("amount > balance", "amount >= balance"),
        "bug_type": "operator misuse",
        "test": """
            def check(withdraw):
                assert withdraw(100, 30) == 70
                assert withdraw(100, 100) == 0
                try:
                    withdraw(50, 80)
                    raise AssertionError("no InsufficientFunds")
                except InsufficientFunds as e:
                    assert e.shortfall == 30
                    assert str(e) == "cannot withdraw 80 from a balance of 50"
                try:
                    withdraw(10, 0)
                    raise AssertionError("no ValueError")
                except ValueError as e:
                    assert "positive" in str(e)
                try:
                    withdraw(0, 1)
                except Exception as e:
                    assert type(e) is InsufficientFunds and e.args == ("cannot withdraw 1 from a balance of 0",)
                else:
                    raise AssertionError("no exception")
        """,
    },
    {
        "case": "`KeyError` whose message (`e.args`, `str(e)`) the test checks, caught as `KeyError` and as "
                "`LookupError`; a part of the test's own argument returned (`is`)",
        "bug_note": "`parts[:i]` instead of `parts[:i + 1]` in the message",
        "sig": "def get_path(config: dict, path: str):",
        "doc": """
            Look up a dotted path such as "db.host" in nested dicts and return the value found.
            A missing key raises KeyError whose only argument is the path up to and including the
            first part that is missing.
        """,
        "body": """
            node = config
            parts = path.split(".")
            for i, part in enumerate(parts):
                if not isinstance(node, dict) or part not in node:
                    raise KeyError(".".join(parts[: i + 1]))
                node = node[part]
            return node
        """,
        "bug": ("parts[: i + 1]", "parts[:i]"),
        "bug_type": "value misuse",
        "test": """
            def check(get_path):
                cfg = {"db": {"host": "localhost", "ports": [5432, 5433]}, "debug": False}
                assert get_path(cfg, "db.host") == "localhost"
                assert get_path(cfg, "debug") is False
                assert get_path(cfg, "db.ports") is cfg["db"]["ports"]
                try:
                    get_path(cfg, "db.user.name")
                    raise AssertionError("no KeyError")
                except KeyError as e:
                    assert e.args == ("db.user",)
                    assert str(e) == "'db.user'"
                try:
                    get_path(cfg, "cache")
                except LookupError as e:
                    assert type(e) is KeyError and e.args[0] == "cache"
                else:
                    raise AssertionError("no KeyError")
                try:
                    get_path(cfg, "db.host.x")
                except KeyError as e:
                    assert e.args[0] == "db.host.x"
                else:
                    raise AssertionError("no KeyError")
        """,
    },
    {
        "case": "callables of the test that raise: a test-defined exception must pass through the function "
                "as the very object raised (`e is boom`); ValueError retried",
        "bug_note": "`except Exception` instead of `except ValueError`: fatal errors are retried",
        "sig": "def retry(action, attempts: int):",
        "doc": """
            Call action() until it returns without raising ValueError, at most attempts times,
            and return its result. After the last attempt the ValueError propagates; any other
            exception propagates at once, without a retry.
        """,
        "body": """
            for i in range(attempts):
                try:
                    return action()
                except ValueError:
                    if i == attempts - 1:
                        raise
        """,
        "bug": ("except ValueError:", "except Exception:"),
        "bug_type": "excess logic",
        "test": """
            class Fatal(Exception):
                pass


            def check(retry):
                calls = []

                def flaky():
                    calls.append(1)
                    if len(calls) < 3:
                        raise ValueError(f"try {len(calls)}")
                    return "ok"

                assert retry(flaky, 5) == "ok" and len(calls) == 3
                calls.clear()
                try:
                    retry(flaky, 2)
                    raise AssertionError("expected ValueError")
                except ValueError as e:
                    assert str(e) == "try 2" and len(calls) == 2
                boom = Fatal("stop")
                count = [0]

                def fatal():
                    count[0] += 1
                    raise boom

                try:
                    retry(fatal, 4)
                    raise AssertionError("expected Fatal")
                except Fatal as e:
                    assert e is boom and count[0] == 1
                assert retry(lambda: 42, 1) == 42
        """,
    },
    # ---------------------------------------------------------------- callables the test passes in
    {
        "case": "a lambda, a builtin (`len`) and a bound method of the test's dict (`scores.get`) passed as `key`",
        "bug_note": "`sorted(...)[::-1]` instead of `reverse=True`: ties come out in reverse order",
        "imports": "from typing import Any, Callable, List",
        "sig": "def top_k(items: List[Any], k: int, key: Callable[[Any], Any]) -> List[Any]:",
        "doc": """
            Return the k items with the largest key(item), largest first; items with equal keys
            keep their input order.
        """,
        "body": """
            return sorted(items, key=key, reverse=True)[:k]
        """,
        "bug": ("sorted(items, key=key, reverse=True)[:k]", "sorted(items, key=key)[::-1][:k]"),
        "bug_type": "function misuse",
        "test": """
            def check(top_k):
                words = ["kiwi", "banana", "fig", "cherry", "apple"]
                assert top_k(words, 2, lambda w: len(w)) == ["banana", "cherry"]
                assert top_k(words, 3, len) == ["banana", "cherry", "apple"]
                scores = {"ann": 3, "bob": 9, "cid": 5}
                assert top_k(list(scores), 2, scores.get) == ["bob", "cid"]
                assert top_k([3, -4, 1], 2, lambda x: x * x) == [-4, 3]
                assert top_k([], 3, lambda x: x) == []
                assert top_k([1, 2], 5, lambda x: -x) == [1, 2]
                called = []
                top_k([5, 6], 1, lambda x: called.append(x) or x)
                assert sorted(called) == [5, 6]
        """,
    },
    {
        "case": "closures of the test with state (a call counter, a history list) passed in; the test checks "
                "the state afterwards",
        "bug_note": "`range(1, n)`: one application short",
        "imports": "from typing import Any, Callable",
        "sig": "def apply_n_times(f: Callable[[Any], Any], n: int, x: Any) -> Any:",
        "doc": """
            Return f applied n times to x, f(f(...f(x))); n = 0 gives x.
        """,
        "body": """
            for _ in range(n):
                x = f(x)
            return x
        """,
        "bug": ("range(n)", "range(1, n)"),
        "bug_type": "value misuse",
        "test": """
            def make_step(step):
                calls = {"n": 0}

                def inc(v):
                    calls["n"] += 1
                    return v + step

                return inc, calls


            def check(apply_n_times):
                inc, calls = make_step(3)
                assert apply_n_times(inc, 4, 0) == 12
                assert calls["n"] == 4
                assert apply_n_times(inc, 0, "same") == "same" and calls["n"] == 4
                assert apply_n_times(lambda s: s + "!", 3, "hi") == "hi!!!"
                assert apply_n_times(lambda v: v * 2, 10, 1) == 1024
                history = []

                def log(v):
                    history.append(v)
                    return v - 1

                assert apply_n_times(log, 3, 10) == 7 and history == [10, 9, 8]
        """,
    },
    {
        "case": "functions defined in the test, a callable instance of a test class and a lambda, used as "
                "callbacks that append to the test's lists",
        "bug_note": "`return called` indented into the loop: stops after the first handler",
        "imports": "from typing import Any, Callable, Dict, List",
        "sig": "def dispatch(handlers: Dict[str, List[Callable[[Any], Any]]], event: str, payload: Any) -> int:",
        "doc": """
            Call every handler registered for event with payload, in registration order, and
            return how many were called. Handlers of other events are not called.
        """,
        "body": """
            called = 0
            for handler in handlers.get(event, []):
                handler(payload)
                called += 1
            return called
        """,
        "bug": ("        called += 1\n    return called", "        called += 1\n        return called"),
        "bug_type": "missing logic",
        "test": """
            def check(dispatch):
                log = []

                def on_save(p):
                    log.append(("save", p))

                def audit(p):
                    log.append(("audit", p))

                class Recorder:
                    def __init__(self):
                        self.seen = []

                    def __call__(self, p):
                        self.seen.append(p)

                rec = Recorder()
                handlers = {"save": [on_save, audit, rec], "load": [audit]}
                assert dispatch(handlers, "save", {"id": 7}) == 3
                assert log == [("save", {"id": 7}), ("audit", {"id": 7})]
                assert rec.seen == [{"id": 7}]
                assert dispatch(handlers, "load", 1) == 1 and log[-1] == ("audit", 1)
                assert dispatch(handlers, "quit", None) == 0
                payload = []
                dispatch({"x": [lambda p: p.append("touched")]}, "x", payload)
                assert payload == ["touched"]
        """,
    },
    {
        "case": "a callable RETURNED (a memoizing wrapper) that calls back into the test's function, "
                "recursively through the test's own name; the same cached object returned twice (`is`)",
        "bug_note": "cache key `args[0]` instead of `args`: calls that differ in a later argument collide",
        "imports": "import functools",
        "sig": "def memoize(f):",
        "doc": """
            Return a wrapper of f that computes f once per distinct tuple of positional arguments
            and afterwards returns the stored result. The wrapper keeps f's __name__.
        """,
        "body": """
            cache = {}

            @functools.wraps(f)
            def wrapper(*args):
                key = args
                if key not in cache:
                    cache[key] = f(*args)
                return cache[key]

            return wrapper
        """,
        "bug": ("key = args", "key = args[0]"),
        "bug_type": "value misuse",
        "test": """
            def check(memoize):
                calls = []

                def slow_add(a, b):
                    calls.append((a, b))
                    return a + b

                fast = memoize(slow_add)
                assert fast(1, 2) == 3 and fast(1, 2) == 3
                assert calls == [(1, 2)]
                assert fast(1, 5) == 6
                assert calls == [(1, 2), (1, 5)]
                assert fast.__name__ == "slow_add"
                assert callable(fast) and fast is not slow_add

                @memoize
                def fibm(n):
                    return n if n < 2 else fibm(n - 1) + fibm(n - 2)

                assert fibm(80) == 23416728348467685
                other = memoize(lambda x: [x])
                assert other(1) is other(1)
        """,
    },
    # ---------------------------------------------------------------- large and deep values
    {
        "case": "a 300,000-item list passed in (twice, once changed by the test between calls)",
        "bug_note": "`best = current = 0`: wrong for all-negative input",
        "imports": "from typing import List",
        "sig": "def max_subarray(nums: List[int]) -> int:",
        "doc": """
            Return the largest sum of a non-empty run of consecutive items of nums.
        """,
        "body": """
            best = current = nums[0]
            for x in nums[1:]:
                current = current + x if current > 0 else x
                if current > best:
                    best = current
            return best
        """,
        "bug": ("best = current = nums[0]", "best = current = 0"),
        "bug_type": "value misuse",
        "test": """
            def check(max_subarray):
                assert max_subarray([-2, 1, -3, 4, -1, 2, 1, -5, 4]) == 6
                assert max_subarray([5]) == 5
                assert max_subarray([-3, -1, -2]) == -1
                big = [-(i % 997) - 2 for i in range(300_000)]
                big[123_456] = -1
                assert max_subarray(big) == -1
                big[150_000] = 10 ** 9
                assert max_subarray(big) == 10 ** 9
                assert len(big) == 300_000 and big[0] == -2
        """,
    },
    {
        "case": "a 300,000-item list returned",
        "bug_note": "appends the total before adding the item: shifted by one",
        "imports": "from typing import List",
        "sig": "def prefix_sums(nums: List[int]) -> List[int]:",
        "doc": """
            Return the list whose i-th item is nums[0] + ... + nums[i].
        """,
        "body": """
            out = []
            total = 0
            for x in nums:
                total += x
                out.append(total)
            return out
        """,
        "bug": ("total += x\n        out.append(total)", "out.append(total)\n        total += x"),
        "bug_type": "excess logic",
        "test": """
            def check(prefix_sums):
                assert prefix_sums([1, 2, 3]) == [1, 3, 6]
                assert prefix_sums([]) == []
                n = 300_000
                out = prefix_sums(list(range(n)))
                assert len(out) == n and type(out) is list
                assert out[-1] == n * (n - 1) // 2
                assert out[1000] == 500500
                assert out[:4] == [0, 1, 3, 6]
        """,
    },
    {
        "case": "a 1,000-node linked list passed in (a test class with `__slots__`); a node deep inside it "
                "returned (`is`)",
        "bug_note": "loop test on `fast.next`/`fast.next.next`: the first of two middles (and a crash on None)",
        "sig": "def middle_node(head):",
        "doc": """
            Return the middle node of the singly linked list that starts at head (the second of
            the two middle nodes when the length is even); None for an empty list.
        """,
        "body": """
            slow = fast = head
            while fast is not None and fast.next is not None:
                slow = slow.next
                fast = fast.next.next
            return slow
        """,
        "bug": ("while fast is not None and fast.next is not None:",
                "while fast.next is not None and fast.next.next is not None:"),
        "bug_type": "value misuse",
        "test": """
            class Link:
                __slots__ = ("value", "next")

                def __init__(self, value, next=None):
                    self.value = value
                    self.next = next


            def chain(n):
                head = None
                for v in range(n - 1, -1, -1):
                    head = Link(v, head)
                return head


            def check(middle_node):
                head = chain(1000)
                mid = middle_node(head)
                assert mid.value == 500
                node = head
                for _ in range(500):
                    node = node.next
                assert mid is node
                assert middle_node(chain(999)).value == 499
                assert middle_node(chain(1)).value == 0
                assert middle_node(chain(2)).value == 1
                assert middle_node(None) is None
                count, node = 0, head
                while node is not None:
                    count, node = count + 1, node.next
                assert count == 1000
        """,
    },
    {
        "case": "a list nested 150 deep passed in",
        "bug_note": "`isinstance(item, (list, tuple))`: tuples, which are items, get flattened",
        "sig": "def flatten(nested: list) -> list:",
        "doc": """
            Return all the items of an arbitrarily nested list that are not lists, left to right.
            Tuples are items, not nesting.
        """,
        "body": """
            out = []
            for item in nested:
                if isinstance(item, list):
                    out.extend(flatten(item))
                else:
                    out.append(item)
            return out
        """,
        "bug": ("isinstance(item, list)", "isinstance(item, (list, tuple))"),
        "bug_type": "excess logic",
        "test": """
            def check(flatten):
                assert flatten([1, [2, [3, 4]], 5]) == [1, 2, 3, 4, 5]
                assert flatten([]) == [] and flatten([[], [[]]]) == []
                assert flatten([(1, 2), [3, (4,)]]) == [(1, 2), 3, (4,)]
                deep = 42
                for _ in range(150):
                    deep = [deep]
                assert flatten(deep) == [42]
                spine = ["start"]
                cur = spine
                for i in range(150):
                    nxt = [i]
                    cur.append(nxt)
                    cur = nxt
                assert flatten(spine) == ["start"] + list(range(150))
                assert flatten(["a", ["b"], "c"]) == ["a", "b", "c"]
        """,
    },
    {
        "case": "a list nested 150 deep returned",
        "bug_note": "`range(depth - 1)`: one level short",
        "sig": "def nest(value, depth: int):",
        "doc": """
            Return value wrapped in depth levels of one-item lists: nest(1, 2) == [[1]] and
            nest(1, 0) == 1.
        """,
        "body": """
            for _ in range(depth):
                value = [value]
            return value
        """,
        "bug": ("range(depth)", "range(depth - 1)"),
        "bug_type": "value misuse",
        "test": """
            def check(nest):
                assert nest(1, 2) == [[1]]
                assert nest("x", 0) == "x"
                assert nest(None, 1) == [None]
                deep = nest(7, 150)
                d, cur = 0, deep
                while isinstance(cur, list):
                    assert len(cur) == 1
                    cur, d = cur[0], d + 1
                assert d == 150 and cur == 7
                expected = 7
                for _ in range(150):
                    expected = [expected]
                assert deep == expected
                assert repr(nest(0, 3)) == "[[[0]]]"
        """,
    },
]
