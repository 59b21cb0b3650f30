"""gunicorn settings for JetEncode's web process (the API, the dashboard, the admin, /metrics).

    gunicorn -c deploy/gunicorn.conf.py jetencode.wsgi:application

Every value can be overridden with a GUNICORN_* variable below or a command-line flag.

Database connections: Django keeps one connection per *thread* (reused for JETENCODE_CONN_MAX_AGE
seconds), so one web process holds up to GUNICORN_WORKERS x GUNICORN_THREADS connections. Size
PostgreSQL's max_connections (or PgBouncer's pool) for that; see docs/operations.md.
"""

import multiprocessing
import os

bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("GUNICORN_WORKERS", min(4, multiprocessing.cpu_count() * 2 + 1)))
threads = int(os.environ.get("GUNICORN_THREADS", 4))
worker_class = "gthread"
timeout = int(os.environ.get("GUNICORN_TIMEOUT", 60))
graceful_timeout = int(os.environ.get("GUNICORN_GRACEFUL_TIMEOUT", 20))
keepalive = int(os.environ.get("GUNICORN_KEEPALIVE", 5))  # behind a load balancer: below its idle timeout
max_requests = 2000
max_requests_jitter = 200
# X-Forwarded-* is trusted only from these addresses (the load balancer); "*" inside a private network.
forwarded_allow_ips = os.environ.get("GUNICORN_FORWARDED_ALLOW_IPS", "127.0.0.1,::1")
# The worker heartbeat file: on tmpfs where there is one (containers often have a disk-backed /tmp).
if os.path.isdir("/dev/shm"):
    worker_tmp_dir = "/dev/shm"
accesslog = "-"
errorlog = "-"

# pg_stat_activity shows every web connection as jetencode-web unless the operator chose a name.
os.environ.setdefault("JETENCODE_APPLICATION_NAME", "jetencode-web")

# JETENCODE_LOG_JSON=true: gunicorn's own error and access lines become JSON objects too, in the
# same format as the application's (jetencode.logging.JsonFormatter), so one log pipeline parses all.
if os.environ.get("JETENCODE_LOG_JSON", "").strip().lower() in ("1", "true", "yes", "on"):
    logconfig_dict = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "jetencode.logging.JsonFormatter"}},
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
        },
        "root": {"level": "INFO", "handlers": ["console"]},
        "loggers": {
            "gunicorn.error": {"level": "INFO", "handlers": ["console"], "propagate": False},
            "gunicorn.access": {"level": "INFO", "handlers": ["console"], "propagate": False},
        },
    }
