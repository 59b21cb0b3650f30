"""Django settings for JetEncode. Every knob is an environment variable; see .env.example.

Importing them starts nothing and inspects no command line: manage.py names the connection after
its command (JETENCODE_APPLICATION_NAME) and starts the embedded PostgreSQL when DATABASE_URL is
unset; the tests have their own settings (tests/settings.py) on top of these.
"""

import ipaddress
import secrets
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

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
    # django-ninja's templates and static files: /v2/docs serves Swagger UI from here, not a CDN.
    "ninja",
    "corsheaders",
    "jetencode",
    "scheduler",
    "media",
    "api",
    "workers",
    "dashboard",
]

MIDDLEWARE = [
    # First: a preflight is answered before anything else can turn it into a redirect or a 405.
    "corsheaders.middleware.CorsMiddleware",
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
    # Innermost: a HEAD runs the GET view and loses only the body (api/middleware.py).
    "api.middleware.HeadAsGetMiddleware",
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
# Source maps (Swagger UI's are 5 MB) are fetched only by a developer's browser tools: compressing
# them would double collectstatic's time for nothing (whitenoise.compress's list, plus "map").
WHITENOISE_SKIP_COMPRESS_EXTENSIONS = (
    *("jpg", "jpeg", "png", "gif", "webp", "zip", "gz", "tgz", "bz2", "tbz", "xz", "br", "swf", "flv"),
    *("woff", "woff2", "3gp", "3gpp", "asf", "avi", "m4v", "mov", "mp4", "mpeg", "mpg", "webm", "wmv"),
    "map",
)

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
# --- CORS: players and apps on other sites (docs/api.md, "Playing outputs on your site") ---
# Only the API (and /healthz, /metrics) answer cross-origin, and only to the listed origins
# (scheme://host[:port]); "*" allows any. Credentials are the bearer token or a signed playback
# URL, never cookies, so no Access-Control-Allow-Credentials.
CORS_ALLOWED_ORIGINS = [o for o in envlist("JETENCODE_CORS_ORIGINS") if o != "*"]
CORS_ALLOW_ALL_ORIGINS = "*" in envlist("JETENCODE_CORS_ORIGINS")
CORS_URLS_REGEX = r"^/(v1/|v2/|healthz$|metrics$)"
CORS_ALLOW_HEADERS = (
    "accept",
    "authorization",
    "content-type",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "range",
    # tus uploads from a browser (tus-js-client, Uppy): docs/api.md, "Sending a source"
    "tus-resumable",
    "upload-checksum",
    "upload-defer-length",
    "upload-length",
    "upload-metadata",
    "upload-offset",
    "x-http-method-override",
)
# What a player reads from a response: byte ranges for seeking, validators, where a new job is;
# and what a tus client reads: the offset to resume from, the server's limits.
CORS_EXPOSE_HEADERS = (
    "Accept-Ranges",
    "Content-Length",
    "Content-Range",
    "ETag",
    "Location",
    "Retry-After",
    "Tus-Checksum-Algorithm",
    "Tus-Extension",
    "Tus-Max-Size",
    "Tus-Resumable",
    "Tus-Version",
    "Upload-Expires",
    "Upload-Length",
    "Upload-Metadata",
    "Upload-Offset",
)
CORS_PREFLIGHT_MAX_AGE = envint("JETENCODE_CORS_MAX_AGE", 3600, minimum=0)
DATA_UPLOAD_MAX_MEMORY_SIZE = envint("JETENCODE_MAX_BODY_BYTES", 256 * 1024, minimum=1024)

# --- Scheduler and worker timing (validated again by the worker at start) ---
JETENCODE = {
    "LEASE_SECONDS": envfloat("JETENCODE_LEASE_SECONDS", 30, minimum=1),
    "HEARTBEAT_SECONDS": envfloat("JETENCODE_HEARTBEAT_SECONDS", 5, minimum=0.1),
    "STALE_WORKER_SECONDS": envfloat("JETENCODE_STALE_WORKER_SECONDS", 60, minimum=1),
    "REASSIGN_AFTER_SECONDS": envfloat("JETENCODE_REASSIGN_AFTER_SECONDS", 120, minimum=1),
    # Dedicated execution: an unbound reservation fails back to shared execution after this long
    # (the workers' maintenance enforces it); the provisioner command and its deadline.
    "RESERVATION_TIMEOUT_SECONDS": envfloat("JETENCODE_RESERVATION_TIMEOUT_SECONDS", 600, minimum=1),
    "PROVISIONER": envstr("JETENCODE_PROVISIONER"),
    "PROVISIONER_TIMEOUT_SECONDS": envfloat("JETENCODE_PROVISIONER_TIMEOUT_SECONDS", 60, minimum=1),
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
    # Wall-clock limit of one probe process (media.probe: PyAV in a process of its own).
    "PROBE_TIMEOUT_SECONDS": envfloat("JETENCODE_PROBE_TIMEOUT_SECONDS", 60, minimum=1),
    "WEBHOOK_SECRET": envstr("JETENCODE_WEBHOOK_SECRET"),
    "WEBHOOK_ALLOW_PRIVATE": envbool("JETENCODE_WEBHOOK_ALLOW_PRIVATE", False),
    # A delivery as a whole (connect + send + response), enforced on its socket.
    "WEBHOOK_DEADLINE_SECONDS": envfloat("JETENCODE_WEBHOOK_DEADLINE_SECONDS", 30, minimum=0.1),
    # The webhook host's DNS lookup (at submission and before each delivery).
    "WEBHOOK_DNS_TIMEOUT_SECONDS": envfloat("JETENCODE_WEBHOOK_DNS_TIMEOUT_SECONDS", 5, minimum=0.1),
    # /metrics is computed at most once per this many seconds per web process (api/metrics.py).
    "METRICS_CACHE_SECONDS": envfloat("JETENCODE_METRICS_CACHE_SECONDS", 10, minimum=0),
    # Login throttling: failed logins per user name / per address within the window.
    "LOGIN_FAILURES_PER_USER": envint("JETENCODE_LOGIN_FAILURES_PER_USER", 10, minimum=0),
    "LOGIN_FAILURES_PER_ADDRESS": envint("JETENCODE_LOGIN_FAILURES_PER_ADDRESS", 50, minimum=0),
    "LOGIN_WINDOW_SECONDS": envfloat("JETENCODE_LOGIN_WINDOW_SECONDS", 900, minimum=1),
}
# Proxies whose X-Forwarded-For names the client for login throttling (jetencode/login.py):
# addresses or networks, comma-separated. Empty: the client is REMOTE_ADDR.
TRUSTED_PROXIES = envlist("JETENCODE_TRUSTED_PROXIES")
for _proxy in TRUSTED_PROXIES:
    try:
        ipaddress.ip_network(_proxy, strict=False)
    except ValueError:
        raise ImproperlyConfigured(
            f"JETENCODE_TRUSTED_PROXIES: {_proxy!r} is not an address or network"
        ) from None
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
# --- Sources (docs/api.md, "Sending a source"): resumable uploads and inputs by URL ---
SOURCES = {
    # tus uploads into <media root>/uploads/
    "UPLOAD_MAX_BYTES": envint("JETENCODE_UPLOAD_MAX_BYTES", 20 * 1024**3, minimum=1),
    "UPLOAD_MAX_CONCURRENT": envint("JETENCODE_UPLOAD_MAX_CONCURRENT", 10, minimum=1),
    "UPLOAD_EXPIRE_SECONDS": envint("JETENCODE_UPLOAD_EXPIRE_SECONDS", 24 * 3600, minimum=60),
    # input_url: what a fetch may reach, how much and how long, and the cache it fills
    "FETCH_ALLOW_PRIVATE": envbool("JETENCODE_FETCH_ALLOW_PRIVATE", False),
    "FETCH_ALLOW_HTTP": envbool("JETENCODE_FETCH_ALLOW_HTTP", False),
    "FETCH_MAX_BYTES": envint("JETENCODE_FETCH_MAX_BYTES", 20 * 1024**3, minimum=1),
    "FETCH_TIMEOUT_SECONDS": envfloat("JETENCODE_FETCH_TIMEOUT_SECONDS", 3600, minimum=1),
    "FETCH_CACHE_MAX_BYTES": envint("JETENCODE_FETCH_CACHE_MAX_BYTES", 50 * 1024**3, minimum=0),
}
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
