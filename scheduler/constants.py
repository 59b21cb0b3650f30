"""The scheduler's vocabulary, each value defined once: the models' check constraints, the SQL
functions' arguments, the API's schemas, the admin's filters and the workers' options all use these.

They are tuples; the models pass `list(...)` to their constraints, as the migrations recorded them.
The SQL in `scheduler/sql/` spells the same values out (a function cannot import Python): change
one here, change it there, and add a migration.
"""

# A job's status, derived by the scheduler functions from its tasks.
JOB_STATUSES = ("pending", "running", "retry_wait", "paused", "completed", "failed", "cancelled")
TERMINAL_STATUSES = ("completed", "failed", "cancelled")
# The statuses the queue lists: every job not yet done, and failed ones until retried or purged.
QUEUE_STATUSES = ("pending", "running", "retry_wait", "paused", "failed")

# One stage delivery (queue_tasks.state); tasks end in the same three states jobs do.
TASK_STATES = ("blocked", "pending", "retry_wait", "running", "completed", "failed", "cancelled")
# The states /metrics counts as queued work (terminal tasks are history).
QUEUED_TASK_STATES = ("blocked", "pending", "retry_wait", "running")

# Who may claim a task: the dispatch goes to any worker, `job` stages to the job's assigned worker
# (they need its workspace), `cluster` stages to any worker again.
PLACEMENTS = ("dispatch", "job", "cluster")
# Which slots claim it: media slots run FFmpeg, the background slot webhooks, uploads, packaging.
POOLS = ("media", "background")
# A worker's lifecycle (queue_workers.lifecycle).
LIFECYCLES = ("active", "draining", "offline")
# A dedicated-execution reservation (queue_reservations.state).
RESERVATION_STATES = ("requested", "bound", "released", "failed")

# What a stage runs on: a worker offers a number of slots per category (`--categories`).
RESOURCE_CATEGORIES = ("cpu", "gpu_encode", "gpu_ai")
# What a job asks for (jobs.hardware): the job type's GPU default when one is available, or forced.
HARDWARE_CHOICES = ("auto", "cpu", "gpu")

# The most VRAM one job may ask its GPU stages to reserve (the API's and the form's bound).
MAX_VRAM_MB = 262_144
# The most VRAM one worker may offer (`--vram-mb`): the sum over all of its GPUs, so far above what
# a single stage may ask (eight 141 GB cards already offer more than MAX_VRAM_MB); a bound against
# typos, not a hardware limit.
MAX_WORKER_VRAM_MB = 10_000_000
