"""`manage.py dashboard_screenshots`: screenshots of every dashboard page for docs/dashboard.md.

Point it at a running server (the README run command, with its demo jobs) whose database is the one
this command's settings name; it logs in, visits each page and writes PNGs. Needs playwright-python
and a Chromium (Debian's /usr/bin/chromium by default).
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]


class Command(BaseCommand):
    help = "Log in to a running dashboard and save a screenshot of each page (for docs/dashboard.md)."

    def add_arguments(self, parser):
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="the running server")
        parser.add_argument("--username", default="admin")
        parser.add_argument("--password", help="default: the generated admin password under var/")
        parser.add_argument("--viewer-username", help="also shoot the queue as this read-only user")
        parser.add_argument("--viewer-password")
        parser.add_argument("--out", default=str(settings.BASE_DIR / "docs" / "img"))
        parser.add_argument("--chromium", default="/usr/bin/chromium")

    def handle(self, *args, **options):
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            raise CommandError("playwright is not installed (pip install playwright)") from None
        password = options["password"]
        if password is None:
            path = settings.VAR_DIR / "admin_password"
            if not path.exists():
                raise CommandError("give --password (no generated admin password under var/)")
            password = path.read_text().strip()
        out = Path(options["out"])
        out.mkdir(parents=True, exist_ok=True)
        base = options["url"].rstrip("/")
        pages = self.pages()  # database reads first: playwright's sync API runs an event loop

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=options["chromium"], args=CHROMIUM_ARGS)
            self.shoot_all(browser, base, options["username"], password, out, pages)
            if options["viewer_username"]:
                self.shoot_all(
                    browser,
                    base,
                    options["viewer_username"],
                    options["viewer_password"],
                    out,
                    [("viewer-queue", "/dashboard/queue")],
                )
            browser.close()

    def pages(self) -> list[tuple[str, str]]:
        from scheduler.models import JobOutput, QueueWorker

        pages = [
            ("overview", "/dashboard/?hours=1"),
            ("queue", "/dashboard/queue"),
            ("jobs", "/dashboard/jobs"),
            ("job-new", "/dashboard/jobs/new?type=transcode"),
            ("library", "/dashboard/library"),
            ("workers", "/dashboard/workers"),
            ("admin-tasks", "/admin/scheduler/queuetask/"),
        ]
        video = (
            JobOutput.objects.filter(name__endswith=".mp4")
            .order_by("-created_at")
            .values_list("job_id", flat=True)
            .first()
        )
        if video:
            pages.append(("job", f"/dashboard/jobs/{video}"))
        worker = QueueWorker.objects.order_by("uid").values_list("uid", flat=True).first()
        if worker:
            pages.append(("worker", f"/dashboard/workers/{worker}"))
        return pages

    def shoot_all(self, browser, base, username, password, out, pages):
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        page = context.new_page()
        page.goto(base + "/accounts/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", password or "")
        page.click("button[type=submit]")
        page.wait_for_load_state("networkidle")
        if "/accounts/login/" in page.url:
            raise CommandError(f"could not log in as {username}")
        for name, path in pages:
            page.goto(base + path)
            page.wait_for_load_state("networkidle")
            page.wait_for_timeout(500)
            target = out / f"dashboard-{name}.png"
            page.screenshot(path=str(target), full_page=not path.startswith("/admin/"))
            self.stdout.write(f"{target}")
        context.close()
