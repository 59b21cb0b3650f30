"""Typed readers for environment variables.

Each helper fails loudly (ImproperlyConfigured) on a value it cannot parse, so a typo in a
deployment stops the process at start instead of silently falling back to a default.
Every `X` may also be given as `X_FILE`, naming a file whose content is the value (for secrets
mounted by systemd credentials, Docker or Kubernetes).
"""

import os
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
