"""hls.js and Shaka Player on another site play JetEncode ladders, in Debian's Chromium.

The integrator's page is served from a second local port (another origin than the API, which is
pytest-django's live server), with the players vendored under tests/players/vendor/ (hls.js 1.7.4
and Shaka Player 5.2.12 from the npm registry, their licences beside them; no CDN). The API lists
that origin in CORS_ALLOWED_ORIGINS (JETENCODE_CORS_ORIGINS). Two real transcodes by a real worker
process: an H.264 ladder (MPEG-TS, audio muxed) and an AV1 ladder (CMAF: video-only tracks and an
audio rendition in an EXT-X-MEDIA group). Each plays with the bearer token sent as a header and
through a signed playback URL; a plain <video> element plays the signed URL too (Chromium's own
HLS), and a revoked URL stops the players.

Without /usr/bin/chromium (or JETENCODE_CHROMIUM) or playwright these tests skip; with CI=true they
fail instead.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.kit.db import job_status
from tests.kit.waiting import wait_for
from tests.kit.web import issue_token

HERE = Path(__file__).parent
CHROMIUM = os.environ.get("JETENCODE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--autoplay-policy=no-user-gesture-required",
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(420),
]

PAGE = """<!doctype html><meta charset="utf-8"><title>integrator</title>
<script src="/vendor/hls-1.7.4.min.js"></script>
<script src="/vendor/shaka-player-5.2.12.compiled.js"></script>
<video id="v" muted playsinline width="320"></video>
<script>
window.playerError = null;
const video = document.getElementById('v');
const bearer = t => t ? {Authorization: 'Bearer ' + t} : {};
window.playHls = (src, token) => {
  const hls = new Hls({xhrSetup: xhr => { if (token) xhr.setRequestHeader('Authorization', 'Bearer ' + token); }});
  hls.on(Hls.Events.ERROR, (event, data) => { if (data.fatal) window.playerError = 'hls.js: ' + data.details; });
  hls.loadSource(src); hls.attachMedia(video); video.play();
};
window.playShaka = async (src, token) => {
  shaka.polyfill.installAll();
  const player = new shaka.Player();
  await player.attach(video);
  player.getNetworkingEngine().registerRequestFilter((type, request) => Object.assign(request.headers, bearer(token)));
  player.addEventListener('error', e => { window.playerError = 'shaka: ' + e.detail.code; });
  try { await player.load(src); video.play(); } catch (e) { window.playerError = 'shaka: ' + e.code; }
};
window.playNative = src => { video.src = src; video.play(); };
</script>
"""
PLAYING = "() => window.playerError || (video.currentTime > 1.5 && video.videoWidth > 0)"


class IntegratorSite(SimpleHTTPRequestHandler):
    """The other origin: the page above and the vendored players, nothing else."""

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path.split("?")[0] == "/player.html":
            body = PAGE.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path.startswith("/vendor/"):
            return super().do_GET()
        self.send_error(404)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site():
    handler = functools.partial(IntegratorSite, directory=str(HERE))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _unavailable() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium, or set JETENCODE_CHROMIUM)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright)"
    return None


@pytest.fixture(scope="module")
def browser():
    reason = _unavailable()
    if reason:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"browser tests are mandatory on CI: {reason}")
        pytest.skip(f"browser tests skipped: {reason}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def ladders(live_server, settings, site, start_worker, worker_env):
    """{"h264": job id, "av1": job id}: two finished transcodes of the demo clip."""
    from media import submission
    from media.demo import seed_demo_clips

    settings.MEDIA_ROOT_DIR = Path(worker_env["JETENCODE_MEDIA_ROOT"])
    settings.OUTPUT_ROOT_DIR = Path(worker_env["JETENCODE_OUTPUT_ROOT"])
    settings.CORS_ALLOWED_ORIGINS = [site]
    seed_demo_clips()
    base = {
        "input": "videos/demo-landscape.mp4",
        "preset": "ultrafast",
        "segment_seconds": 1,
        "quality_metrics": [],
    }
    jobs = {
        "h264": {**base, "ladder": [{"height": 240}, {"height": 180}]},
        "av1": {**base, "ladder": [{"height": 180, "codec": "av1"}, {"height": 144, "codec": "av1"}]},
    }
    ids = {
        name: submission.create_job(None, {"type": "transcode", "params": p}).id for name, p in jobs.items()
    }
    start_worker(f"players-{os.getpid()}", "--concurrency", "2")
    for job in ids.values():
        wait_for(lambda job=job: job_status(job) in ("completed", "failed"), 300, f"job {job}", interval=0.2)
        assert job_status(job) == "completed"
    return ids


def play(browser, site, how: str, src: str, token: str | None = None) -> list[tuple[str, int]]:
    """Load the integrator's page, start `how` (playHls, playShaka, playNative) on `src`; returns
    the (url, status) of every API response the page received once the video plays."""
    context = browser.new_context()
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    fetched: list[tuple[str, int]] = []
    page.on("response", lambda r: fetched.append((r.url, r.status)) if "/v2/" in r.url else None)
    try:
        page.goto(f"{site}/player.html")
        page.evaluate(f"([s, t]) => window.{how}(s, t)", [src, token])
        page.wait_for_function(PLAYING.replace("video.", "document.getElementById('v')."), timeout=60_000)
        assert page.evaluate("window.playerError") is None, (
            how,
            page.evaluate("window.playerError"),
            fetched,
        )
        assert page.evaluate("document.getElementById('v').error") is None
        audio = page.evaluate("document.getElementById('v').webkitAudioDecodedByteCount")
        assert audio > 0, (how, "no audio decoded", fetched)
    finally:
        context.close()
    assert errors == [], errors
    return fetched


def master_url(live_server, job) -> str:
    return f"{live_server.url}/v2/jobs/{job}/outputs/hls/master.m3u8"


def signed_master(live_server, job, token) -> str:
    import json
    from urllib.request import Request, urlopen

    request = Request(
        f"{live_server.url}/v2/jobs/{job}/playback",
        data=json.dumps({"ttl_seconds": 600}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urlopen(request) as response:
        return json.loads(response.read())["playlist_url"]


def test_players_on_another_origin_play_both_ladders_with_a_token_or_a_signed_url(
    browser, site, live_server, ladders, charlie, bob
):
    """One test (the two transcodes are its setup): hls.js and Shaka with the bearer header, then
    through signed URLs with no header at all, a plain <video> through a signed URL, and after
    DELETE /v2/jobs/{id}/playback the same URL refused."""
    token = issue_token(charlie, "read")
    for player in ("playHls", "playShaka"):
        for codec, job in ladders.items():
            check_ladder(codec, play(browser, site, player, master_url(live_server, job), token))
            signed = signed_master(live_server, job, token)
            fetched = play(browser, site, player, signed)
            check_ladder(codec, fetched)
            # Every request the player made carried the token in its path: it sent no header.
            assert all("/playback/" in url for url, _ in fetched), fetched
    for job in ladders.values():
        fetched = play(browser, site, "playNative", signed_master(live_server, job, token))
        assert fetched and all(status in (200, 206) for _, status in fetched), fetched
    job = ladders["av1"]
    signed = signed_master(live_server, job, token)
    revoke(live_server, job, issue_token(bob, "operate"))
    for player in ("playHls", "playShaka"):
        statuses = refused(browser, site, player, signed)
        assert 403 in statuses and 200 not in statuses, (player, statuses)


def check_ladder(codec: str, fetched: list[tuple[str, int]]) -> None:
    ok = [url for url, status in fetched if status in (200, 206)]
    assert any(url.endswith("/hls/master.m3u8") for url in ok), fetched
    if codec == "av1":  # CMAF: the audio rendition is its own track, fetched on its own
        assert any(url.endswith("/hls/audio/index.m3u8") for url in ok), fetched
        assert any(re.search(r"/hls/audio/seg_\d+\.m4s$", url) for url in ok), fetched
        assert any(re.search(r"/hls/1\d\dp/seg_\d+\.m4s$", url) for url in ok), fetched
    else:
        assert any(re.search(r"/hls/\d+p/seg_\d+\.ts$", url) for url in ok), fetched


def revoke(live_server, job, operate_token: str) -> None:
    from urllib.request import Request, urlopen

    request = Request(
        f"{live_server.url}/v2/jobs/{job}/playback",
        headers={"Authorization": f"Bearer {operate_token}"},
        method="DELETE",
    )
    with urlopen(request) as response:
        assert response.status == 200


def refused(browser, site, player: str, src: str) -> list[int]:
    """Statuses of the playback requests of a player that was handed a revoked URL; it must stop."""
    context = browser.new_context()
    page = context.new_page()
    statuses: list[int] = []
    page.on("response", lambda r: statuses.append(r.status) if "/playback/" in r.url else None)
    try:
        page.goto(f"{site}/player.html")
        page.evaluate(f"([s, t]) => window.{player}(s, t)", [src, None])
        page.wait_for_function("() => window.playerError !== null", timeout=45_000)
    finally:
        context.close()
    return statuses
