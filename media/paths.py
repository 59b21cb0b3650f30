"""Where media may be read from and written to.

Every path that comes from a user (job params, API, dashboard) is a string relative to the media
root. It is checked twice: at submission, so a bad job is refused with a clear message, and again in
the worker just before FFmpeg sees it, because the filesystem may have changed in between (a symlink
planted after submission must not let a job read outside the root).

FFmpeg reads a file name as a protocol when it looks like `scheme:` and as an option when it starts
with `-`, so both are refused here, and the argv builders only ever receive absolute paths.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path, PurePosixPath

from django.conf import settings

MAX_PATH_CHARS = 1024
# The filesystem counts bytes, not characters: NAME_MAX is 255 bytes per name on Linux (200 × "é"
# is 400 bytes, and exists() would raise ENAMETOOLONG), so names are measured in UTF-8 bytes.
MAX_COMPONENT_BYTES = 255
MAX_PATH_BYTES = 1024
# RFC 3986 scheme syntax; also catches FFmpeg protocols (concat:, file:, data:...).
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")


class UnsafePathError(ValueError):
    """A user-supplied path was refused; the message says why and is safe to show to the user."""


def check_relative(rel: str, *, what: str = "path") -> PurePosixPath:
    """Validate the *shape* of a relative path without touching the filesystem.

    Returns the normalised path (no `.` components). Raises UnsafePathError.
    """
    if not isinstance(rel, str):
        raise UnsafePathError(f"{what} must be a string")
    if rel == "" or rel.strip() == "":
        raise UnsafePathError(f"{what} must not be empty")
    if len(rel) > MAX_PATH_CHARS:
        raise UnsafePathError(f"{what} is longer than {MAX_PATH_CHARS} characters")
    if "\x00" in rel:
        raise UnsafePathError(f"{what} contains a NUL byte")
    if _utf8_length(rel) is None:
        raise UnsafePathError(f"{what} is not valid Unicode text")
    if _utf8_length(rel) > MAX_PATH_BYTES:
        raise UnsafePathError(f"{what} is longer than {MAX_PATH_BYTES} bytes (UTF-8)")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in rel):
        raise UnsafePathError(f"{what} contains a control character")
    if "\\" in rel:
        raise UnsafePathError(f"{what} contains a backslash; use / to separate directories")
    if rel.startswith("/") or rel.startswith("~"):
        raise UnsafePathError(f"{what} must be relative to the media root, not absolute")
    # FFmpeg reads a protocol from the start of the name, including option forms such as
    # "subfile,,start,0,end,1,,:x", so any ':' before the first '/' is refused.
    if _SCHEME.match(rel) or "://" in rel or ":" in rel.split("/", 1)[0]:
        scheme = re.split(r"[:,]", rel, maxsplit=1)[0][:20]
        raise UnsafePathError(
            f"{what} looks like a URL or FFmpeg protocol ({scheme}:); only files under the media root are allowed"
        )
    parts = [part for part in rel.split("/") if part not in ("", ".")]
    if not parts:
        raise UnsafePathError(f"{what} must name a file or directory under the media root")
    for part in parts:
        if part == "..":
            raise UnsafePathError(f"{what} must not contain '..'")
        if part.startswith("-"):
            raise UnsafePathError(
                f"{what} has a name beginning with '-', which FFmpeg would read as an option"
            )
        if _utf8_length(part) > MAX_COMPONENT_BYTES:
            raise UnsafePathError(
                f"{what} has a name longer than {MAX_COMPONENT_BYTES} bytes (UTF-8), the filesystem's limit"
            )
    return PurePosixPath(*parts)


def _utf8_length(text: str) -> int | None:
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate
        return None


def media_root() -> Path:
    return Path(settings.MEDIA_ROOT_DIR).resolve()


def resolve_under(
    root: Path, rel: str, *, what: str = "path", must_exist: bool = False, kind: str | None = None
) -> Path:
    """Resolve `rel` under `root`, following symlinks, and refuse anything that lands outside it.

    kind: None (anything), "file" or "dir" — checked only when the path exists or must_exist.
    """
    clean = check_relative(rel, what=what)
    root = root.resolve()
    resolved = (root / clean).resolve(strict=False)
    if not resolved.is_relative_to(root):
        raise UnsafePathError(f"{what} resolves outside the media root (a symlink escapes it)")
    if must_exist and not resolved.exists():
        raise UnsafePathError(f"{what} {str(clean)!r} does not exist under the media root")
    if resolved.exists():
        if kind == "file" and not resolved.is_file():
            raise UnsafePathError(f"{what} {str(clean)!r} is not a regular file")
        if kind == "dir" and not resolved.is_dir():
            raise UnsafePathError(f"{what} {str(clean)!r} is not a directory")
    return resolved


def resolve_media_path(
    rel: str, *, must_exist: bool = False, kind: str | None = None, what: str = "path"
) -> Path:
    """The absolute, symlink-resolved path of `rel` under JETENCODE_MEDIA_ROOT."""
    return resolve_under(media_root(), rel, what=what, must_exist=must_exist, kind=kind)


def relative_to_media_root(path: Path) -> str:
    """The media-root-relative POSIX string stored in MediaAsset.path."""
    return path.resolve().relative_to(media_root()).as_posix()


def check_output_name(name: str) -> str:
    """A published file's name under <output root>/<job id>/: relative, no traversal, no hidden temp names."""
    clean = check_relative(name, what="output name")
    if any(part.startswith(".") for part in clean.parts):
        # Leading dots are reserved for in-progress temporary files in the output directory.
        raise UnsafePathError("output name must not have a component beginning with '.'")
    return clean.as_posix()


def job_output_dir(job_id: str | uuid.UUID) -> Path:
    """JETENCODE_OUTPUT_ROOT/<job id>; the id is parsed as a UUID so it can never traverse."""
    return Path(settings.OUTPUT_ROOT_DIR).resolve() / str(uuid.UUID(str(job_id)))


def workspace_file(workspace: Path, rel: str) -> Path:
    """A path a stage payload names inside its job's workspace (payloads are ours, but check anyway)."""
    return resolve_under(Path(workspace), rel, what="workspace path")
