"""The HTTP API (django-ninja): `api.api` composes one router per area; see docs/api.md."""
