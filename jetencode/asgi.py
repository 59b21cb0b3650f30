import os

from django.core.asgi import get_asgi_application

from jetencode import embedded_db

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jetencode.settings")
embedded_db.start_if_used()  # without DATABASE_URL, the embedded PostgreSQL (development)
application = get_asgi_application()
