"""Reading other harnesses' files, which are hostile input: the same rules as `trace_io`, plus zip archives.

- Files are found by a walk that never follows a link (`safefs.walk`) and read by the safe reader: regular
  files only, at most a size cap, no symlink (a link named like a trajectory is reported, not opened).
- JSON goes through `trace_io.parse_json`: nesting capped before the parser recurses, numbers finite,
  lone surrogates replaced.
- An Inspect `.eval` log is a zip: it is read from memory, its members located through the central
  directory, each decompressed (stored, deflate or zstd) in bounded pieces up to a cap, whatever the
  headers claim; the member count, each member's size and the total are capped. Nothing is extracted.

Every refusal raises `Unreadable` with a one-line reason.
"""

from __future__ import annotations

import os
import struct
import zipfile
import zlib
from collections.abc import Iterator
from typing import Any

from ..files import Unreadable, read_path, trace_files
from ..jsontext import parse_json

MAX_SOURCE_BYTES = 128 << 20  # one trajectory file (JSON) or one .eval archive
MAX_MEMBER_BYTES = 128 << 20  # one member of an .eval archive, decompressed
MAX_ARCHIVE_BYTES = 512 << 20  # all the members read from one archive, decompressed
MAX_MEMBERS = 100_000
PATTERNS = ("*.json", "*.eval")  # what an import walk reads; the format is told from the name and the content
_ZSTD = 93  # the zip compression method number of zstandard (what Inspect writes)
_PIECE = 64 << 10


def source_files(src: str | os.PathLike[str]) -> Iterator[tuple[str, bytes | Unreadable]]:
    """(path from `src`, bytes or why refused) for each file an import reads: `src` itself when it is a
    file, else every ``*.json`` and ``*.eval`` below it, in path order, no link followed."""
    if not os.path.isdir(src):
        try:
            yield os.path.basename(src), read_path(src, MAX_SOURCE_BYTES)
        except Unreadable as e:
            yield os.path.basename(src), e
        return
    yield from trace_files(src, MAX_SOURCE_BYTES, PATTERNS)


def json_object(raw: bytes) -> dict[str, Any]:
    """The JSON object `raw` holds (the safe parser's rules); Unreadable otherwise."""
    data = parse_json(raw)
    if not isinstance(data, dict):
        raise Unreadable(f"top level is {type(data).__name__}, not an object")
    return data


class Archive:
    """A zip archive held in memory, its members read one at a time within the caps (see the module)."""

    def __init__(self, raw: bytes) -> None:
        import io

        self.raw = raw
        self.read_total = 0
        try:
            with zipfile.ZipFile(io.BytesIO(raw)) as zf:
                infos = zf.infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as e:
            raise Unreadable(f"not a readable zip archive ({type(e).__name__})") from None
        if len(infos) > MAX_MEMBERS:
            raise Unreadable(f"more than {MAX_MEMBERS} members in the archive")
        self.members = {i.filename: i for i in infos if not i.is_dir()}

    def names(self) -> list[str]:
        return list(self.members)

    def read(self, name: str, limit: int = MAX_MEMBER_BYTES) -> bytes:
        """The decompressed bytes of member `name`, at most `limit` (and the archive's total cap)."""
        info = self.members.get(name)
        if info is None:
            raise Unreadable(f"the archive has no member {name!r}")
        if info.flag_bits & 0x1:
            raise Unreadable(f"{name}: encrypted")
        left = min(limit, MAX_ARCHIVE_BYTES - self.read_total)
        if info.file_size > left:
            raise Unreadable(f"{name}: {info.file_size} bytes decompressed, over the cap of {left}")
        out = _inflate(self._data(info), info.compress_type, info.file_size, name)  # never more than it declares
        self.read_total += len(out)
        return out

    def json(self, name: str) -> Any:
        return parse_json(self.read(name))

    def _data(self, info: zipfile.ZipInfo) -> memoryview:
        """The compressed bytes of a member: after its local header, as long as the central directory says."""
        at = info.header_offset
        head = self.raw[at:at + 30]
        if len(head) < 30 or head[:4] != b"PK\x03\x04":
            raise Unreadable(f"{info.filename}: no local header where the directory points")
        name_len, extra_len = struct.unpack("<HH", head[26:30])
        start = at + 30 + name_len + extra_len
        end = start + info.compress_size
        if end > len(self.raw):
            raise Unreadable(f"{info.filename}: runs past the end of the archive")
        return memoryview(self.raw)[start:end]


def _inflate(data: memoryview, method: int, limit: int, name: str) -> bytes:
    """`data` decompressed by `method`, refusing output over `limit` bytes; decompressed a piece at a time."""
    if method == zipfile.ZIP_STORED:
        if len(data) > limit:
            raise Unreadable(f"{name}: over the cap of {limit} bytes")
        return bytes(data)
    if method == zipfile.ZIP_DEFLATED:
        d = zlib.decompressobj(-15)
        chunks, size, pos = [], 0, 0
        try:
            while True:
                if d.unconsumed_tail:
                    piece: bytes | memoryview = d.unconsumed_tail
                elif pos < len(data):
                    piece, pos = data[pos:pos + _PIECE], pos + _PIECE
                else:
                    break
                out = d.decompress(piece, limit + 1 - size)  # at most what is left, plus one: never 0 (no cap)
                size += len(out)
                chunks.append(out)
                if size > limit:
                    raise Unreadable(f"{name}: over the cap of {limit} bytes decompressed")
                if d.eof:
                    break
        except zlib.error as e:
            raise Unreadable(f"{name}: bad deflate data ({e})") from None
        return b"".join(chunks)
    if method == _ZSTD:
        return _unzstd(data, limit, name)
    raise Unreadable(f"{name}: compression method {method} not supported")


def _unzstd(data: memoryview, limit: int, name: str) -> bytes:
    try:
        import zstandard
    except ImportError:
        raise Unreadable(f"{name}: zstd-compressed; reading it needs the 'zstandard' package "
                         "(pip install 'agent-harness[inspect]')") from None
    import io

    try:
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(bytes(data)), read_across_frames=True)
        chunks, size = [], 0
        while chunk := reader.read(min(_PIECE * 16, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise Unreadable(f"{name}: over the cap of {limit} bytes decompressed")
    except zstandard.ZstdError as e:
        raise Unreadable(f"{name}: bad zstd data ({e})") from None
    return b"".join(chunks)
