"""The NinjaAPI instance: one router per area, token/session auth, JSON errors everywhere.

Mounted at the site root (see `api.urls`): /v2/... for jobs, queue, workers and stats,
/v1/sysinfo, /healthz and /metrics. OpenAPI at /v2/openapi.json, interactive docs at /v2/docs.
"""

from __future__ import annotations

import threading

from django.urls import get_script_prefix
from ninja import NinjaAPI, Swagger

from api import errors, jobs, openapi, openapi_tus, outputs, playback, queue, stats, system, workers
from api.auth import AUTH
from api.rendering import DisclosingRenderer

DESCRIPTION = """\
Create media jobs and follow them; steer the queue; watch workers.

**Auth.** `Authorization: Bearer <token>` (create one with `python manage.py create_api_token USERNAME
--scope read|operate|fleet`). `read` tokens may only GET; `operate` tokens may do everything their user's
permissions allow (Operators group or superuser); `fleet` tokens may GET and drain, evacuate and undrain
workers, nothing else. The dashboard's session cookie also works, with CSRF enforced on unsafe methods.
401 without valid credentials, 403 when scope or permission is not enough. Viewers and read tokens get
every response without filesystem paths, FFmpeg command lines, tracebacks or webhook URL paths and queries.
`/healthz` and `/metrics` need no credentials (`/metrics` is computed at most every
`JETENCODE_METRICS_CACHE_SECONDS`).

**Errors.** `{"detail": "..."}`; validation errors are 422
`{"detail": "invalid <fields>", "errors": [{"field": ..., "message": ...}]}`.
"""


class JetEncodeAPI(NinjaAPI):
    _openapi_lock = threading.Lock()
    _openapi_documents: dict = {}

    def get_openapi_operation_id(self, operation) -> str:
        # Function names are unique across the routers: list_jobs, create_job, pause, drain_worker...
        return operation.view_func.__name__

    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        # POST /v2/jobs: one typed body per job type, joined on `type` (see api.openapi), and the tus
        # routes, which are plain views (api.openapi_tus). Built once per process and prefix:
        # /v2/openapi.json needs no credentials, and building the document walks every schema of
        # every route (tens of milliseconds a request otherwise).
        key = (path_prefix, get_script_prefix(), tuple(sorted((path_params or {}).items())))
        with self._openapi_lock:
            if key not in self._openapi_documents:
                document = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
                self._openapi_documents[key] = openapi_tus.add_tus_paths(
                    openapi.add_typed_job_bodies(document)
                )
            return self._openapi_documents[key]

    def get_root_path(self, path_params) -> str:
        # Mounted at the site root without ninja's "" home view (api.urls drops it).
        return get_script_prefix()


api = JetEncodeAPI(
    title="JetEncode API",
    version="2",
    description=DESCRIPTION,
    auth=AUTH,
    openapi_url="/v2/openapi.json",
    docs_url="/v2/docs",
    # Swagger UI from ninja's own static files ("ninja" is an installed app), and no online
    # validator badge: the page makes no request beyond this server, so it works offline.
    docs=Swagger(settings={"validatorUrl": None}),
    urls_namespace="jetencode-api",
    renderer=DisclosingRenderer(),
)
errors.install(api)

api.add_router("/v2/jobs", jobs.router)
api.add_router("/v2/jobs", outputs.router)
api.add_router("/v2/jobs", playback.router)
api.add_router("/v2/job-types", jobs.types_router)
api.add_router("/v2/queue", queue.router)
api.add_router("/v2/workers", workers.router)
api.add_router("/v2/stats", stats.router)
api.add_router("", system.router)
