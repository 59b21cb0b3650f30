"""/v2/docs works offline: Swagger UI's script, style and icons are served by this server
(django-ninja's own copies, through WhiteNoise), the page references nothing elsewhere, and in a
real headless Chromium that may reach only the live server the operations render."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlparse

import pytest
from django.test import Client

CHROMIUM = os.environ.get("JETENCODE_CHROMIUM", "/usr/bin/chromium")


def test_the_docs_page_references_only_assets_this_server_serves():
    client = Client()
    page = client.get("/v2/docs")
    assert page.status_code == 200
    html = page.content.decode()
    urls = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert any(url.endswith("swagger-ui-bundle.js") for url in urls), urls
    assert any(url.endswith("swagger-ui.css") for url in urls), urls
    for url in urls:
        assert not urlparse(url).netloc and url.startswith("/"), f"{url} is not on this server"
        response = client.get(url)
        assert response.status_code == 200, url
        body = b"".join(response.streaming_content) if response.streaming else response.content
        assert len(body) > 100, url
    assert "cdn" not in html.lower()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(120)
def test_swagger_ui_renders_with_every_request_outside_this_server_blocked(live_server):
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"browser tests are mandatory on CI: no Chromium at {CHROMIUM}")
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set JETENCODE_CHROMIUM)")
    from playwright.sync_api import sync_playwright

    local = urlparse(live_server.url).netloc
    blocked: list[str] = []
    errors: list[str] = []

    def only_local(route):
        if urlparse(route.request.url).netloc == local:
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            page = browser.new_page(base_url=live_server.url)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.route("**/*", only_local)
            page.goto("/v2/docs")
            page.wait_for_selector(".opblock-summary-path", timeout=30_000)
            assert "JetEncode API" in page.inner_text(".info .title")
            paths = page.locator(".opblock-summary-path").all_inner_texts()
            assert any("/v2/jobs" in path for path in paths), paths
        finally:
            browser.close()
    assert blocked == [], f"requests outside this server: {blocked}"
    assert errors == [], errors
