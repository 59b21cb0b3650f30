"""gunicorn settings for JetEncode's web process. Override with GUNICORN_* or command-line flags."""

import multiprocessing
import os

bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("GUNICORN_WORKERS", min(4, multiprocessing.cpu_count() * 2 + 1)))
threads = int(os.environ.get("GUNICORN_THREADS", 4))
worker_class = "gthread"
timeout = int(os.environ.get("GUNICORN_TIMEOUT", 60))
graceful_timeout = 20
max_requests = 2000
max_requests_jitter = 200
accesslog = "-"
errorlog = "-"
# Each web process is visible in pg_stat_activity as jetencode-web.
raw_env = ["JETENCODE_APPLICATION_NAME=jetencode-web"]
