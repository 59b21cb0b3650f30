from django.urls import path

from dashboard.views import actions, jobs, library, overview, queue, workers

app_name = "dashboard"

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("queue", queue.queue, name="queue"),
    path("jobs", jobs.jobs, name="jobs"),
    path("jobs/new", jobs.job_new, name="job_new"),
    path("jobs/<uuid:job_id>", jobs.job_detail, name="job"),
    path("jobs/<uuid:job_id>/outputs/<path:name>", jobs.job_output, name="job_output"),
    path("jobs/<uuid:job_id>/actions/<slug:action>", actions.job_action, name="job_action"),
    path("library", library.library, name="library"),
    path("library/actions", library.library_action, name="library_action"),
    path("library/<uuid:asset_id>/thumbnail", library.asset_thumbnail, name="asset_thumbnail"),
    path("workers", workers.workers, name="workers"),
    path("workers/<str:uid>", workers.worker_detail, name="worker"),
    path("workers/<str:uid>/drain", actions.worker_drain, name="worker_drain"),
    path("workers/<str:uid>/evacuate", actions.worker_evacuate, name="worker_evacuate"),
    path("workers/<str:uid>/undrain", actions.worker_undrain, name="worker_undrain"),
]
