"""The media domain: the job types and their params, FFmpeg (finding it, its commands, progress),
probing, paths and their safety checks, output storage, webhooks, HLS, the demo clips, the media
library (`MediaAsset`) and job submission (`submission.create_job`, shared by the API and the
dashboard). Built on `scheduler`; see docs/media.md."""
