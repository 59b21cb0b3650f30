"""HLS master playlists and the default adaptive ladder.

FFmpeg writes each rendition's media playlist; the master playlist that lists the renditions is
written here, from the probed renditions, so BANDWIDTH, RESOLUTION and CODECS describe the files
that were actually produced rather than what was asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

from media.probe import MediaInfo

# (short side, peak video kbps): the usual H.264 ladder for 30 fps content.
DEFAULT_LADDER = ((1080, 5000), (720, 2800), (480, 1400), (360, 800))
AAC_LC = "mp4a.40.2"


def default_bitrate_kbps(short_side: int) -> int:
    """Peak video bitrate for a rung: interpolated by pixel count from the default ladder."""
    for side, kbps in DEFAULT_LADDER:
        if short_side >= side:
            return int(kbps * (short_side / side) ** 2) if short_side > side else kbps
    return max(100, int(800 * (short_side / 360) ** 2))


def ladder_for(source_short_side: int, requested: list[dict] | None = None) -> list[dict]:
    """The rungs to produce: [{"name": "720p", "height": 720, "video_bitrate_kbps": 2800}, ...].

    Requested rungs above the source are dropped (upscaling wastes bits); if nothing is left, one
    rung at the source's own size is produced, so every source yields a playable stream.
    """
    source_short_side = max(2, source_short_side // 2 * 2)
    if requested:
        rungs = [(r["height"], r.get("video_bitrate_kbps")) for r in requested]
    else:
        rungs = [(side, kbps) for side, kbps in DEFAULT_LADDER]
    chosen = []
    for side, kbps in sorted(rungs, key=lambda r: -r[0]):
        if side <= source_short_side:
            chosen.append(
                {"name": f"{side}p", "height": side, "video_bitrate_kbps": kbps or default_bitrate_kbps(side)}
            )
    if not chosen:
        side = source_short_side
        chosen.append({"name": f"{side}p", "height": side, "video_bitrate_kbps": default_bitrate_kbps(side)})
    return chosen


@dataclass(frozen=True)
class Variant:
    uri: str  # relative to the master playlist
    bandwidth: int  # bits per second, peak
    average_bandwidth: int
    width: int
    height: int
    frame_rate: float | None
    codecs: str


def variant_from_probe(uri: str, info: MediaInfo, peak_video_kbps: int | None, audio_kbps: int) -> Variant:
    average = int(info.bitrate or 0)
    peak_video = (peak_video_kbps or 0) * 1000
    audio = audio_kbps * 1000 if info.has_audio else 0
    # BANDWIDTH must not be below the real peak: use the encoder's cap when there is one.
    bandwidth = max(average, peak_video + audio) if peak_video else int(average * 1.2)
    codecs = ",".join(c for c in (info.codec_string, AAC_LC if info.has_audio else "") if c)
    return Variant(uri, bandwidth, average, int(info.width or 0), int(info.height or 0), info.fps, codecs)


def master_playlist(variants: list[Variant]) -> str:
    lines = ["#EXTM3U", "#EXT-X-VERSION:3", "#EXT-X-INDEPENDENT-SEGMENTS"]
    for v in sorted(variants, key=lambda v: -v.bandwidth):
        attrs = [f"BANDWIDTH={v.bandwidth}"]
        if v.average_bandwidth:
            attrs.append(f"AVERAGE-BANDWIDTH={v.average_bandwidth}")
        if v.width and v.height:
            attrs.append(f"RESOLUTION={v.width}x{v.height}")
        if v.frame_rate:
            attrs.append(f"FRAME-RATE={v.frame_rate:.3f}")
        if v.codecs:
            attrs.append(f'CODECS="{v.codecs}"')
        lines.append("#EXT-X-STREAM-INF:" + ",".join(attrs))
        lines.append(v.uri)
    return "\n".join(lines) + "\n"
