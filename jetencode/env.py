"""Typed readers for environment variables.

Each helper fails loudly (ImproperlyConfigured) on a value it cannot parse, so a typo in a
deployment stops the process at start instead of silently falling back to a default.
Every `X` may also be given as `X_FILE`, naming a file whose content is the value (for secrets
mounted by systemd credentials, Docker or Kubernetes).
"""

import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured


def _raw(name: str) -> str | None:
    file_name = os.environ.get(f"{name}_FILE")
    if file_name:
        try:
            return Path(file_name).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={file_name!r} cannot be read: {exc}") from exc
    return os.environ.get(name)


def envstr(name: str, default: str = "") -> str:
    value = _raw(name)
    return default if value is None or value == "" else value


def envbool(name: str, default: bool = False) -> bool:
    value = _raw(name)
    if value is None or value == "":
        return default
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use true or false)")


def envint(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    value = _raw(name)
    if value is None or value == "":
        result = default
    else:
        try:
            result = int(value)
        except ValueError:
            raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from None
    if minimum is not None and result < minimum:
        raise ImproperlyConfigured(f"{name}={result} is below the minimum {minimum}")
    if maximum is not None and result > maximum:
        raise ImproperlyConfigured(f"{name}={result} is above the maximum {maximum}")
    return result


def envfloat(name: str, default: float, *, minimum: float | None = None) -> float:
    value = _raw(name)
    if value is None or value == "":
        result = default
    else:
        try:
            result = float(value)
        except ValueError:
            raise ImproperlyConfigured(f"{name}={value!r} is not a number") from None
    if minimum is not None and result < minimum:
        raise ImproperlyConfigured(f"{name}={result} is below the minimum {minimum}")
    return result


def envlist(name: str, default: list[str] | None = None) -> list[str]:
    value = _raw(name)
    if value is None or value == "":
        return list(default or [])
    return [item.strip() for item in value.split(",") if item.strip()]


def create_secret_file(path: Path, value: str) -> str:
    """Write `value` to `path` mode 0600 from the first byte, unless the file exists; return what
    the file holds. Atomic: the value goes to a private temporary file that is then hard-linked into
    place, so no reader sees a partial file, no other user ever can read it (there is no moment with
    the umask's mode before a chmod), and of two processes racing to create it, both end up with
    the one that was linked first."""
    path = Path(path)
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(value)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass  # another process created it first: use theirs
    finally:
        temporary.unlink(missing_ok=True)
    return path.read_text().strip()
