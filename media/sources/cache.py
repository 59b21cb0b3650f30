"""The cache of fetched sources under `<media root>/.cache/sources/`.

    objects/<sha256 of the bytes><suffix>   content-addressed: two URLs of the same bytes share one file
    index/<sha256 of the URL>.json          URL -> {object, etag, last_modified, size}
    partial/<sha256 of the URL>.part        a download in progress (resumed with Range), with its
    partial/<sha256 of the URL>.json        validators, and the .lock one fetch at a time holds

An entry is reused only when the origin says the URL still names the same bytes (a 304 to the
conditional request built from the entry's ETag / Last-Modified, or the same S3 ETag); a URL
without either validator is fetched again (its bytes may still land on an existing object).
The cache is bounded: the workers' maintenance loop removes least recently used objects beyond
JETENCODE_FETCH_CACHE_MAX_BYTES and anything unused for JETENCODE_RETENTION_DAYS (`trim`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from media.paths import media_root

CACHE_DIR = ".cache/sources"
_SAFE_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,10}")
PARTIAL_KEEP_SECONDS = 24 * 3600.0  # an abandoned partial download is dropped after a day
RECENT_USE_SECONDS = 3600.0  # an object used this recently is never trimmed (a job may be linking it)


@dataclass(frozen=True)
class Entry:
    path: Path
    etag: str
    last_modified: str
    size: int


def suffix_of(url_path: str) -> str:
    suffix = Path(url_path).suffix.lower()
    return suffix if _SAFE_SUFFIX.fullmatch(suffix) else ".media"


class SourceCache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else media_root() / CACHE_DIR
        for sub in ("objects", "index", "partial"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    @staticmethod
    def key(url: str) -> str:
        return hashlib.sha256(url.encode("utf-8")).hexdigest()

    def lookup(self, key: str) -> Entry | None:
        index = _read_json(self.root / "index" / f"{key}.json")
        if not index:
            return None
        path = self.root / "objects" / Path(str(index.get("object", ""))).name
        if not path.is_file():
            return None
        return Entry(path, index.get("etag", ""), index.get("last_modified", ""), path.stat().st_size)

    def partial(self, key: str) -> Path:
        return self.root / "partial" / f"{key}.part"

    def partial_validators(self, key: str) -> dict:
        return _read_json(self.root / "partial" / f"{key}.json") or {}

    def save_partial_validators(self, key: str, validators: dict) -> None:
        _write_json(self.root / "partial" / f"{key}.json", validators)

    def drop_partial(self, key: str) -> None:
        self.partial(key).unlink(missing_ok=True)
        (self.root / "partial" / f"{key}.json").unlink(missing_ok=True)

    def store(self, key: str, validators: dict, suffix: str) -> Path:
        """Move the finished partial into objects/ under its content hash and index the URL."""
        part = self.partial(key)
        digest = hashlib.sha256()
        with open(part, "rb") as handle:
            while block := handle.read(1024 * 1024):
                digest.update(block)
        final = self.root / "objects" / f"{digest.hexdigest()}{suffix}"
        if final.is_file():
            part.unlink()  # the same bytes came from another URL before
        else:
            os.replace(part, final)
        os.utime(final)
        _write_json(
            self.root / "index" / f"{key}.json",
            {
                "object": final.name,
                "etag": validators.get("etag", ""),
                "last_modified": validators.get("last_modified", ""),
                "size": final.stat().st_size,
            },
        )
        (self.root / "partial" / f"{key}.json").unlink(missing_ok=True)
        return final

    def touch(self, entry: Entry) -> Path:
        os.utime(entry.path)  # recency for trim()
        return entry.path

    @contextlib.contextmanager
    def lock(self, key: str, check_cancelled: Callable[[], None]) -> Iterator[None]:
        """One fetch of a URL at a time on this media root; others wait (and may be cancelled)."""
        fd = os.open(self.root / "partial" / f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                    check_cancelled()
                    time.sleep(0.2)
            yield
        finally:
            os.close(fd)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write_json(path: Path, data: dict) -> None:
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(json.dumps(data))
    os.replace(temp, path)


def trim(max_bytes: int, keep_days: float, root: Path | None = None) -> int:
    """Remove objects unused for `keep_days`, then the least recently used until the cache holds at
    most `max_bytes`; then index entries whose object is gone and stale partial downloads.
    Returns how many files were removed."""
    cache_root = Path(root) if root is not None else media_root() / CACHE_DIR
    if not (cache_root / "objects").is_dir():
        return 0
    now = time.time()
    objects = sorted(
        ((p.stat().st_mtime, p.stat().st_size, p) for p in (cache_root / "objects").iterdir() if p.is_file()),
        key=lambda item: item[0],
    )
    total = sum(size for _, size, _ in objects)
    removed = 0
    for mtime, size, path in objects:
        expired = now - mtime > keep_days * 86400
        if (expired or total > max_bytes) and now - mtime > RECENT_USE_SECONDS:
            path.unlink(missing_ok=True)
            total -= size
            removed += 1
    for index in (cache_root / "index").glob("*.json"):
        entry = _read_json(index) or {}
        if not (cache_root / "objects" / Path(str(entry.get("object", ""))).name).is_file():
            index.unlink(missing_ok=True)
    for part in (cache_root / "partial").glob("*.part"):
        if now - part.stat().st_mtime > PARTIAL_KEEP_SECONDS:
            part.unlink(missing_ok=True)
            part.with_suffix(".json").unlink(missing_ok=True)
            removed += 1
    return removed
