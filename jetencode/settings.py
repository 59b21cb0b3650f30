"""Django settings for JetEncode. Every knob is an environment variable; see .env.example.

Importing them starts nothing and inspects no command line: manage.py names the connection after
its command (JETENCODE_APPLICATION_NAME) and starts the embedded PostgreSQL when DATABASE_URL is
unset; the tests have their own settings (tests/settings.py) on top of these.
"""

import secrets
from pathlib import Path

import dj_database_url

from jetencode.env import create_secret_file, envbool, envfloat, envint, envlist, envstr

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(envstr("JETENCODE_VAR_DIR", str(BASE_DIR / "var"))).resolve()


DEBUG = envbool("JETENCODE_DEBUG", False)


def _secret_key() -> str:
    """JETENCODE_SECRET_KEY (or _FILE). Without one, development (JETENCODE_DEBUG=true, or the
    embedded PostgreSQL, which is laptop-only) keeps a random key in var/secret_key; anything else
    is a deployment and refuses to start rather than sign sessions with a key nobody chose."""
    key = envstr("JETENCODE_SECRET_KEY")
    if key:
        return key
    if not DEBUG and envstr("DATABASE_URL"):
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            "JETENCODE_SECRET_KEY is not set (nor JETENCODE_SECRET_KEY_FILE) and JETENCODE_DEBUG is off: "
            "refusing to start with a generated key. Set JETENCODE_SECRET_KEY_FILE to a file holding a "
            "long random key (python3 -c 'import secrets; print(secrets.token_urlsafe(50))'), or "
            "JETENCODE_DEBUG=true on a development machine."
        )
    # Development: a random key kept under var/ (0600) so sessions survive restarts.
    return create_secret_file(VAR_DIR / "secret_key", secrets.token_urlsafe(50))


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = envlist("JETENCODE_ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = envlist("JETENCODE_CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "jetencode",
    "scheduler",
    "media",
    "api",
    "workers",
    "dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "jetencode.middleware.RefuseNulMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "api.middleware.JsonMethodNotAllowedMiddleware",
]

ROOT_URLCONF = "jetencode.urls"
WSGI_APPLICATION = "jetencode.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database: PostgreSQL only (row locks, SKIP LOCKED and LISTEN/NOTIFY are the scheduler) ---
# Shown in pg_stat_activity: manage.py sets jetencode-<command>, gunicorn.conf.py jetencode-web.
APPLICATION_NAME = envstr("JETENCODE_APPLICATION_NAME", "jetencode-web")[:63]
DATABASE_URL = envstr("DATABASE_URL")
if DATABASE_URL:
    _db = dj_database_url.parse(DATABASE_URL)
    if not _db["ENGINE"].endswith("postgresql"):
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            "DATABASE_URL must be a postgresql:// URL: JetEncode runs on PostgreSQL only"
        )
else:
    from jetencode import embedded_db

    # Where the embedded server listens; the entry points start it (embedded_db.start_if_used).
    _db = {"ENGINE": "django.db.backends.postgresql", **embedded_db.connection_settings()}
_db.setdefault("OPTIONS", {})["application_name"] = APPLICATION_NAME
_db["CONN_MAX_AGE"] = envint("JETENCODE_CONN_MAX_AGE", 60, minimum=0)
_db["CONN_HEALTH_CHECKS"] = True
_db.setdefault("TEST", {})
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard:overview"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
if envbool("JETENCODE_SIMPLE_STATIC", False):
    # `runserver` (and the tests, in their settings) need no collectstatic step.
    STORAGES["staticfiles"] = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}
WHITENOISE_USE_FINDERS = True

# --- Security: production-safe by default; the dev run command relaxes what HTTP needs ---
SECURE_HTTPS = envbool("JETENCODE_HTTPS", False)
SESSION_COOKIE_SECURE = SECURE_HTTPS
CSRF_COOKIE_SECURE = SECURE_HTTPS
SECURE_SSL_REDIRECT = SECURE_HTTPS and envbool("JETENCODE_SSL_REDIRECT", True)
SECURE_HSTS_SECONDS = envint("JETENCODE_HSTS_SECONDS", 31536000 if SECURE_HTTPS else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HTTPS
SECURE_HSTS_PRELOAD = SECURE_HTTPS
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if envbool("JETENCODE_BEHIND_PROXY") else None
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"  # nothing is framed: outputs play in <video>, which X-Frame-Options does not affect
# Load balancer health checks and Prometheus scrape over plain HTTP inside the network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]
DATA_UPLOAD_MAX_MEMORY_SIZE = envint("JETENCODE_MAX_BODY_BYTES", 256 * 1024, minimum=1024)

# --- Scheduler and worker timing (validated again by the worker at start) ---
JETENCODE = {
    "LEASE_SECONDS": envfloat("JETENCODE_LEASE_SECONDS", 30, minimum=1),
    "HEARTBEAT_SECONDS": envfloat("JETENCODE_HEARTBEAT_SECONDS", 5, minimum=0.1),
    "STALE_WORKER_SECONDS": envfloat("JETENCODE_STALE_WORKER_SECONDS", 60, minimum=1),
    "REASSIGN_AFTER_SECONDS": envfloat("JETENCODE_REASSIGN_AFTER_SECONDS", 120, minimum=1),
    "SHUTDOWN_GRACE_SECONDS": envfloat("JETENCODE_SHUTDOWN_GRACE_SECONDS", 30, minimum=0),
    "POLL_SECONDS": envfloat("JETENCODE_POLL_SECONDS", 1, minimum=0.05),
    "RECOVERY_INTERVAL_SECONDS": envfloat("JETENCODE_RECOVERY_INTERVAL_SECONDS", 5, minimum=0.1),
    "SAMPLE_INTERVAL_SECONDS": envfloat("JETENCODE_SAMPLE_INTERVAL_SECONDS", 60, minimum=1),
    "RETENTION_DAYS": envint("JETENCODE_RETENTION_DAYS", 30, minimum=1),
    "NOTIFY": envbool("JETENCODE_NOTIFY", True),
    "PREPARED_STATEMENTS": envbool("JETENCODE_PREPARED_STATEMENTS", True),
    "STALL_SECONDS": envfloat("JETENCODE_STALL_SECONDS", 120, minimum=1),
    # Address-space limit (RLIMIT_AS) of each stage subprocess (FFmpeg), in MiB; 0 for none.
    "FFMPEG_MEMORY_MB": envint("JETENCODE_FFMPEG_MEMORY_MB", 16384, minimum=0),
    "WEBHOOK_SECRET": envstr("JETENCODE_WEBHOOK_SECRET"),
    "WEBHOOK_ALLOW_PRIVATE": envbool("JETENCODE_WEBHOOK_ALLOW_PRIVATE", False),
    # A delivery as a whole (connect + send + response), enforced on its socket.
    "WEBHOOK_DEADLINE_SECONDS": envfloat("JETENCODE_WEBHOOK_DEADLINE_SECONDS", 30, minimum=0.1),
    # Login throttling: failed logins per user name / per address within the window.
    "LOGIN_FAILURES_PER_USER": envint("JETENCODE_LOGIN_FAILURES_PER_USER", 10, minimum=0),
    "LOGIN_FAILURES_PER_ADDRESS": envint("JETENCODE_LOGIN_FAILURES_PER_ADDRESS", 50, minimum=0),
    "LOGIN_WINDOW_SECONDS": envfloat("JETENCODE_LOGIN_WINDOW_SECONDS", 900, minimum=1),
}
MEDIA_ROOT_DIR = Path(envstr("JETENCODE_MEDIA_ROOT", str(VAR_DIR / "media"))).resolve()
OUTPUT_ROOT_DIR = Path(envstr("JETENCODE_OUTPUT_ROOT", str(VAR_DIR / "outputs"))).resolve()
WORKSPACE_ROOT_DIR = Path(envstr("JETENCODE_WORKSPACE_ROOT", str(VAR_DIR / "workspace"))).resolve()
# Split transcodes (issue 33): the shared scratch every worker mounts (chunks, stitched renditions),
# and the source length from which split "auto" encodes in chunks.
SCRATCH_ROOT_DIR = Path(envstr("JETENCODE_SCRATCH_ROOT", str(VAR_DIR / "scratch"))).resolve()
SPLIT_MIN_SECONDS = envfloat("JETENCODE_SPLIT_MIN_SECONDS", 120, minimum=0)
# How often each worker sweeps the shared scratch, and how long after a job ended its files stay.
SCRATCH_SWEEP_SECONDS = envfloat("JETENCODE_SCRATCH_SWEEP_SECONDS", 60, minimum=0.5)
# Threads of each split chunk's FFmpeg (0: FFmpeg's own choice); the split benchmark holds it to 1.
FFMPEG_THREADS = envint("JETENCODE_FFMPEG_THREADS", 0, minimum=0, maximum=256)
SCRATCH_GRACE_SECONDS = envfloat("JETENCODE_SCRATCH_GRACE_SECONDS", 30, minimum=0)
FFMPEG_BINARY = envstr("JETENCODE_FFMPEG")
S3_BUCKET = envstr("JETENCODE_S3_BUCKET")
S3_ENDPOINT_URL = envstr("JETENCODE_S3_ENDPOINT_URL")
S3_PREFIX = envstr("JETENCODE_S3_PREFIX", "outputs")
# GET /v2/jobs/{id}/outputs/{name} answers S3 outputs with a redirect to a presigned URL this long-lived.
S3_PRESIGN_SECONDS = envint("JETENCODE_S3_PRESIGN_SECONDS", 3600, minimum=1, maximum=7 * 24 * 3600)
# The API's public address (scheme://host[:port]), for the absolute download_url of webhook bodies;
# API responses use the request's own host. Empty: webhooks carry a path relative to the API.
PUBLIC_URL = envstr("JETENCODE_PUBLIC_URL").rstrip("/")

# /metrics: also expose the deprecated jetencode_vram_{used,total}_mb (removed in the next release).
METRICS_VRAM_MB = envbool("JETENCODE_METRICS_VRAM_MB", False)

# --- Logging: plain text by default, one JSON object per line with JETENCODE_LOG_JSON=true ---
LOG_JSON = envbool("JETENCODE_LOG_JSON", False)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "jetencode.logging.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json" if LOG_JSON else "text"}},
    "root": {"handlers": ["console"], "level": envstr("JETENCODE_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}, "pgserver": {"level": "WARNING"}},
}
