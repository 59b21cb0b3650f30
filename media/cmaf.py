"""CMAF (ISO/IEC 23000-19) for HEVC and AV1 HLS: the brands FFmpeg does not write, and a reader
that says what a packaged file is.

FFmpeg's HLS muxer writes fMP4 through its DASH mode: with `movflags=+cmaf` the init segment's
`ftyp` lists `cmfc`, but every media segment starts with `styp` major brand `msdh` (a DASH media
segment). `mark_segments` rewrites that brand to `cmfs` (a CMAF segment) in place: the box keeps
its size, `msdh` and `msix` stay as compatible brands, nothing else moves.

`describe` reads the top-level boxes of an init or media segment (brands, tracks and handler
types, fragment flags), what the tests and `tools/`-style checks compare against the CMAF rules:
one track per file, `cmfc` in the init segment, `tfdt` in every fragment, and
default-base-is-moof addressing.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

SEGMENT_BRAND = b"cmfs"
TRACK_BRAND = b"cmfc"
DEFAULT_BASE_IS_MOOF = 0x020000
CONTAINERS = {b"moov", b"trak", b"mdia", b"moof", b"traf", b"mvex", b"minf", b"stbl"}


def boxes(data: bytes, start: int = 0, end: int | None = None) -> Iterator[tuple[bytes, int, int, int]]:
    """(type, offset, size, header length) of each box in data[start:end]."""
    end = len(data) if end is None else end
    offset = start
    while offset + 8 <= end:
        size, kind = struct.unpack_from(">I4s", data, offset)
        header = 8
        if size == 1:
            size, header = struct.unpack_from(">Q", data, offset + 8)[0], 16
        elif size == 0:
            size = end - offset
        if size < header or offset + size > end:
            raise ValueError(f"box {kind!r} at {offset} overruns the file")
        yield kind, offset, size, header
        offset += size


def mark_segments(directory: Path) -> int:
    """Give every `*.m4s` media segment under `directory` the CMAF segment brand; returns how many
    were changed. Idempotent."""
    changed = 0
    for path in sorted(Path(directory).glob("*.m4s")):
        with path.open("r+b") as handle:
            head = handle.read(12)
            if len(head) == 12 and head[4:8] == b"styp" and head[8:12] != SEGMENT_BRAND:
                handle.seek(8)
                handle.write(SEGMENT_BRAND)
                changed += 1
    return changed


@dataclass
class FileFacts:
    major_brand: str = ""
    brands: list[str] = field(default_factory=list)
    handlers: list[str] = field(default_factory=list)  # one per trak (init) or traf track id (segment)
    track_ids: set[int] = field(default_factory=set)
    fragments: int = 0
    fragments_with_tfdt: int = 0
    fragments_base_is_moof: int = 0


def _brands(data: bytes, offset: int, size: int, header: int, facts: FileFacts) -> None:
    body = data[offset + header : offset + size]
    facts.major_brand = body[:4].decode("latin-1")
    facts.brands = [body[i : i + 4].decode("latin-1") for i in range(8, len(body) - 3, 4)]


def _walk(data: bytes, start: int, end: int, facts: FileFacts, in_traf: dict) -> None:
    for kind, offset, size, header in boxes(data, start, end):
        if kind in (b"ftyp", b"styp"):
            _brands(data, offset, size, header, facts)
        elif kind == b"hdlr":
            facts.handlers.append(data[offset + header + 8 : offset + header + 12].decode("latin-1"))
        elif kind == b"tkhd":
            version = data[offset + header]
            position = offset + header + (20 if version == 1 else 12)
            facts.track_ids.add(struct.unpack_from(">I", data, position)[0])
        elif kind == b"tfhd":
            flags = int.from_bytes(data[offset + header + 1 : offset + header + 4], "big")
            facts.track_ids.add(struct.unpack_from(">I", data, offset + header + 4)[0])
            in_traf["base_is_moof"] = bool(flags & DEFAULT_BASE_IS_MOOF)
        elif kind == b"tfdt":
            in_traf["tfdt"] = True
        if kind in CONTAINERS:
            traf: dict = {} if kind == b"traf" else in_traf
            _walk(data, offset + header, offset + size, facts, traf)
            if kind == b"traf":
                facts.fragments += 1
                facts.fragments_with_tfdt += bool(traf.get("tfdt"))
                facts.fragments_base_is_moof += bool(traf.get("base_is_moof"))


def describe(path: Path) -> FileFacts:
    """What an init segment or a media segment holds (see the module docstring)."""
    data = Path(path).read_bytes()
    facts = FileFacts()
    _walk(data, 0, len(data), facts, {})
    return facts
