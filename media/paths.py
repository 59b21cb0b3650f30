"""Where media may be read from and written to.

Every path that comes from a user (job params, API, dashboard) is a string relative to the media
root. It is checked twice: at submission, so a bad job is refused with a clear message, and again in
the worker just before FFmpeg sees it, because the filesystem may have changed in between (a symlink
planted after submission must not let a job read outside the root).

FFmpeg reads a file name as a protocol when it looks like `scheme:` and as an option when it starts
with `-`, so both are refused here, and the argv builders only ever receive absolute paths. Its
image2 reader (and PyAV's) reads a name with `%` as a numbered sequence (`shot%d.png` opens
`shot0.png`, `shot1.png`, ..., symlinks followed), so `%` is refused in every name too.

Checking a name is not enough on its own: the filesystem can change between the check and the use.
So the worker opens inputs by file descriptor (`open_media_file`): the name is resolved and checked,
then each component of the *resolved* path is opened with O_NOFOLLOW from the resolved root, and
only that descriptor is read (copied or linked into the workspace, or, for a split job's stages,
which read the source in place, named `/proc/self/fd/N` to FFmpeg and PyAV: `descriptor_path`).
A symlink planted in between makes the open fail instead of leading outside. docs/security.md,
"Containment".
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import uuid
from collections.abc import Iterator
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
    if "%" in rel:
        raise UnsafePathError(
            f"{what} contains '%', which FFmpeg reads as an image-sequence pattern (shot%d.png); rename the file"
        )
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
    A symlink loop, a directory that may not be searched or a name too long for the filesystem is
    an UnsafePathError (a 4xx at submission, a clean stage failure in a worker), never an OSError.
    """
    clean = check_relative(rel, what=what)
    root = root.resolve()
    try:
        resolved = (root / clean).resolve(strict=False)
        if not resolved.is_relative_to(root):
            raise UnsafePathError(f"{what} resolves outside the media root (a symlink escapes it)")
        found = _lstat_or_none(resolved)
    except RuntimeError:  # Path.resolve on a loop (Python 3.11 raises RuntimeError)
        raise UnsafePathError(f"{what} {str(clean)!r} is a symlink loop") from None
    except OSError as exc:
        raise UnsafePathError(f"{what} {str(clean)!r} {_os_problem(exc)}") from None
    if must_exist and found is None:
        raise UnsafePathError(f"{what} {str(clean)!r} does not exist under the media root")
    if found is not None:
        if kind == "file" and not stat.S_ISREG(found.st_mode):
            raise UnsafePathError(f"{what} {str(clean)!r} is not a regular file")
        if kind == "dir" and not stat.S_ISDIR(found.st_mode):
            raise UnsafePathError(f"{what} {str(clean)!r} is not a directory")
    return resolved


def _lstat_or_none(path: Path) -> os.stat_result | None:
    """The resolved path's own status, or None when it does not exist. A resolved path has no
    symlink left in it, except a dangling or looping last component: those count as missing."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    if stat.S_ISLNK(found.st_mode):
        return None
    return found


def _os_problem(exc: OSError) -> str:
    """A user-safe phrase for an OSError met while resolving or opening a name (no paths in it)."""
    reasons = {
        errno.ELOOP: "is a symlink loop or changed into a symlink while it was opened",
        errno.EACCES: "is not readable by the worker (permission denied)",
        errno.EPERM: "is not readable by the worker (operation not permitted)",
        errno.ENAMETOOLONG: "is a name too long for the filesystem",
        errno.ENOENT: "does not exist under the media root",
        errno.ENOTDIR: "does not exist under the media root (a parent is not a directory)",
        errno.ENXIO: "is not a regular file",
    }
    return reasons.get(exc.errno, f"cannot be opened ({exc.strerror or 'I/O error'})")


def resolve_media_path(
    rel: str, *, must_exist: bool = False, kind: str | None = None, what: str = "path"
) -> Path:
    """The absolute, symlink-resolved path of `rel` under JETENCODE_MEDIA_ROOT."""
    return resolve_under(media_root(), rel, what=what, must_exist=must_exist, kind=kind)


@contextlib.contextmanager
def open_media_file(rel: str, *, what: str = "input") -> Iterator[tuple[int, Path]]:
    """Open a user's file under the media root by descriptor: yields (fd, resolved path).

    The name is checked and resolved (`resolve_media_path`), then opened component by component
    from the resolved root with O_NOFOLLOW, so what is read is the file the check approved even if
    a symlink was planted since. Read the descriptor (or `/proc/self/fd/<fd>`), never the name."""
    root = media_root()
    path = resolve_under(root, rel, what=what, must_exist=True, kind="file")
    try:
        fd = open_beneath(root, path.relative_to(root).parts)
    except OSError as exc:
        raise UnsafePathError(
            f"{what} {check_relative(rel, what=what).as_posix()!r} {_os_problem(exc)}"
        ) from None
    try:
        yield fd, path
    finally:
        os.close(fd)


def descriptor_path(fd: int) -> Path:
    """The name that opens descriptor `fd` itself (the inode opened, whatever its name means now):
    in this process, and in a child that inherits `fd` under the same number (subprocess pass_fds)."""
    return Path(f"/proc/self/fd/{int(fd)}")


_DESCRIPTOR_PATH = re.compile(r"/proc/self/fd/([0-9]+)")


def descriptors_named(*paths: Path | str) -> tuple[int, ...]:
    """The descriptors that `paths` name as `descriptor_path`: what a child given those names must
    inherit (its pass_fds). A user's name can never be one (absolute names are refused)."""
    found = (_DESCRIPTOR_PATH.fullmatch(str(path)) for path in paths)
    return tuple(int(match.group(1)) for match in found if match)


def open_beneath(root: Path, parts: tuple[str, ...] | list[str], *, directory: bool = False) -> int:
    """A read-only descriptor for root/parts, every component opened with O_NOFOLLOW relative to
    its parent's descriptor: no symlink is followed below `root`. The last component must be a
    regular file (or, with directory=True, a directory). Raises OSError (ELOOP for a symlink)."""
    if not parts:
        raise OSError(errno.ENOENT, "no name under the root")
    current = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            current = _step(current, part, os.O_DIRECTORY)
        last_flags = os.O_DIRECTORY if directory else os.O_NONBLOCK  # a FIFO must not block the open
        current = _step(current, parts[-1], last_flags)
        mode = os.fstat(current).st_mode
        if not (stat.S_ISDIR(mode) if directory else stat.S_ISREG(mode)):
            raise OSError(errno.ENXIO, "not a regular file" if not directory else "not a directory")
        if not directory:
            os.set_blocking(current, True)
        return current
    except BaseException:
        os.close(current)
        raise


def _step(parent_fd: int, name: str, flags: int) -> int:
    """Open `name` under `parent_fd` without following a symlink; the parent is closed only when
    the open succeeded (on failure the caller still owns it and closes it)."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | flags, dir_fd=parent_fd)
    os.close(parent_fd)
    return fd


@contextlib.contextmanager
def open_media_dir(rel: str, *, what: str = "directory", create: bool = False) -> Iterator[int]:
    """A directory under the media root by descriptor (O_NOFOLLOW components, as `open_media_file`),
    created component by component when `create`: write into it with dir_fd, never by name."""
    clean = check_relative(rel, what=what) if rel not in ("", ".") else PurePosixPath()
    # Refuse a name that resolves elsewhere before creating anything along it.
    if clean.parts:
        resolve_media_path(rel, what=what, kind="dir")
    current = os.open(media_root(), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in clean.parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, dir_fd=current)
            current = _step(current, part, os.O_DIRECTORY)
    except OSError as exc:
        os.close(current)
        raise UnsafePathError(f"{what} {clean.as_posix()!r} {_os_problem(exc)}") from None
    try:
        yield current
    finally:
        os.close(current)


def resolved_parent(rel: str, *, what: str = "path") -> tuple[str, str]:
    """(the resolved parent directory relative to the media root, the last name) of `rel`: where a
    file may be renamed or created by directory descriptor (`open_media_dir`). The parent is
    resolved (symlinked directories inside the root are fine), the last name is not followed."""
    clean = check_relative(rel, what=what)
    parent = clean.parent.as_posix()
    if parent in ("", "."):
        return "", clean.name
    resolved = resolve_media_path(parent, what=what, kind="dir")
    return relative_to_media_root(resolved), clean.name


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
