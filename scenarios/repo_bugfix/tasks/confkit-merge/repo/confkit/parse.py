def parse_lines(lines: list[str]) -> dict:
    """Parse 'a.b.c = value' lines into a nested dict; '#' starts a comment."""
    out: dict = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        key, _, value = line.partition("=")
        node = out
        *parents, leaf = [k.strip() for k in key.split(".")]
        for k in parents:
            node = node.setdefault(k, {})
        node[leaf] = value.strip()
    return out
