"""`python -m tools.dashboard_screenshots`: screenshots of every dashboard page for docs/dashboard.md.

Point it at a running server (the README run command, with its demo jobs) whose database is the one
this process's settings name (DATABASE_URL, else the embedded PostgreSQL); it logs in, visits each
page and writes PNGs. Needs playwright-python and a Chromium (Debian's /usr/bin/chromium by default).
Exits 2 on bad arguments, 1 when it cannot log in.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools import setup_django

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
ROOT = Path(__file__).resolve().parent.parent


class ScreenshotError(Exception):
    pass


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tools.dashboard_screenshots",
        description="Log in to a running dashboard and save a screenshot of each page (for docs/dashboard.md).",
    )
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the running server")
    parser.add_argument("--username", default="admin")
    parser.add_argument("--password", help="default: the generated admin password under var/")
    parser.add_argument("--viewer-username", help="also shoot the queue as this read-only user")
    parser.add_argument("--viewer-password")
    parser.add_argument("--out", default=str(ROOT / "docs" / "img"))
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("playwright is not installed (pip install playwright)", file=sys.stderr)
        return 2
    setup_django("jetencode-dashboard_screenshots")
    from django.conf import settings

    password = args.password
    if password is None:
        path = settings.VAR_DIR / "admin_password"
        if not path.exists():
            print("give --password (no generated admin password under var/)", file=sys.stderr)
            return 2
        password = path.read_text().strip()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = args.url.rstrip("/")
    shots = pages()  # database reads first: playwright's sync API runs an event loop

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
        try:
            shoot_all(browser, base, args.username, password, out, shots)
            if args.viewer_username:
                shoot_all(
                    browser,
                    base,
                    args.viewer_username,
                    args.viewer_password,
                    out,
                    [("viewer-queue", "/dashboard/queue")],
                )
        except ScreenshotError as exc:
            print(exc, file=sys.stderr)
            return 1
        finally:
            browser.close()
    return 0


def pages() -> list[tuple[str, str]]:
    from scheduler.models import Job, JobOutput, QueueWorker

    found = [
        ("overview", "/dashboard/"),
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
        found.append(("job", f"/dashboard/jobs/{video}"))
    failed = Job.objects.filter(status="failed").order_by("-created_at").values_list("id", flat=True).first()
    if failed:
        found.append(("job-failed", f"/dashboard/jobs/{failed}"))
    worker = QueueWorker.objects.order_by("uid").values_list("uid", flat=True).first()
    if worker:
        found.append(("worker", f"/dashboard/workers/{worker}"))
    return found


def shoot_all(browser, base, username, password, out, pages):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.goto(base + "/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password or "")
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
    if "/accounts/login/" in page.url:
        raise ScreenshotError(f"could not log in as {username}")
    for name, path in pages:
        page.goto(base + path)
        page.wait_for_load_state("networkidle")
        page.wait_for_timeout(500)
        target = out / f"dashboard-{name}.png"
        page.screenshot(path=str(target), full_page=not path.startswith("/admin/"))
        print(target)
    context.close()


if __name__ == "__main__":
    sys.exit(main())
