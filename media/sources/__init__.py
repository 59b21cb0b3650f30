"""Sources from outside the media root: inputs by URL (guard, cache, fetch).

Resumable uploads live in media/uploads.py (the bytes and rows) and api/uploads.py (tus).
"""
