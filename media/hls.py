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
    audio_group: str | None = None  # the EXT-X-MEDIA group its audio comes from (CMAF: own track)


AUDIO_GROUP = "audio"


@dataclass(frozen=True)
class AudioRendition:
    """The one audio track of a CMAF ladder (`EXT-X-MEDIA:TYPE=AUDIO`), shared by its variants."""

    uri: str
    channels: int | None = None
    name: str = "Main"
    language: str | None = None


def variant_from_probe(
    uri: str,
    info: MediaInfo,
    peak_video_kbps: int | None,
    audio_kbps: int,
    video_codec_string: str | None = None,
) -> Variant:
    """`video_codec_string` replaces the probe's (which knows H.264 only): see `codec_string_of`."""
    average = int(info.bitrate or 0)
    peak_video = (peak_video_kbps or 0) * 1000
    audio = audio_kbps * 1000 if info.has_audio else 0
    # BANDWIDTH must not be below the real peak: use the encoder's cap when there is one.
    bandwidth = max(average, peak_video + audio) if peak_video else int(average * 1.2)
    video = video_codec_string or info.codec_string
    codecs = ",".join(c for c in (video, AAC_LC if info.has_audio else "") if c)
    return Variant(uri, bandwidth, average, int(info.width or 0), int(info.height or 0), info.fps, codecs)


def audio_media_line(audio: AudioRendition) -> str:
    attrs = [f'TYPE=AUDIO,GROUP-ID="{AUDIO_GROUP}"', f'NAME="{audio.name}"']
    if audio.language:
        attrs.append(f'LANGUAGE="{audio.language}"')
    attrs += ["DEFAULT=YES", "AUTOSELECT=YES"]
    if audio.channels:
        attrs.append(f'CHANNELS="{int(audio.channels)}"')
    attrs.append(f'URI="{audio.uri}"')
    return "#EXT-X-MEDIA:" + ",".join(attrs)


def master_playlist(variants: list[Variant], version: int = 3, audio: AudioRendition | None = None) -> str:
    """`version` 7 when any variant uses fMP4 segments (HEVC/AV1), 3 for MPEG-TS only. With
    `audio`, the variants whose `audio_group` names it play it alongside their video track."""
    lines = ["#EXTM3U", f"#EXT-X-VERSION:{int(version)}", "#EXT-X-INDEPENDENT-SEGMENTS"]
    if audio is not None:
        lines.append(audio_media_line(audio))
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
        if v.audio_group and audio is not None:
            attrs.append(f'AUDIO="{v.audio_group}"')
        lines.append("#EXT-X-STREAM-INF:" + ",".join(attrs))
        lines.append(v.uri)
    return "\n".join(lines) + "\n"


# --- CODECS strings for HEVC and AV1 (RFC 6381 / ISO 14496-15 annex E, AV1-ISOBMFF) ----------------

FMP4_CODECS = ("hevc", "av1")  # packaged as CMAF HLS (one track per file); H.264 stays MPEG-TS


def _reverse_bits32(value: int) -> int:
    return int(f"{value:032b}"[::-1], 2)


def hevc_codec_string(hvcc: bytes | None, sample_entry: str = "hvc1") -> str:
    """`hvc1.<profile>.<compat>.<tier><level>.<constraints>` from an hvcC record, e.g.
    hvc1.1.6.L93.B0 (Main, level 3.1). Empty when the record is not an hvcC."""
    if not hvcc or len(hvcc) < 13 or hvcc[0] != 1:
        return ""
    space = ("", "A", "B", "C")[hvcc[1] >> 6]
    tier = "H" if hvcc[1] & 0x20 else "L"
    profile = hvcc[1] & 0x1F
    compat = _reverse_bits32(int.from_bytes(hvcc[2:6], "big"))
    constraints = list(hvcc[6:12])
    while constraints and constraints[-1] == 0:
        constraints.pop()
    parts = [sample_entry, f"{space}{profile}", f"{compat:X}", f"{tier}{hvcc[12]}"]
    parts += [f"{b:X}" for b in constraints]
    return ".".join(parts)


def av1_codec_string(av1c: bytes | None) -> str:
    """`av01.<profile>.<level><tier>.<bitdepth>` from an av1C record, e.g. av01.0.04M.08."""
    if not av1c or len(av1c) < 3 or av1c[0] != 0x81:
        return ""
    profile = av1c[1] >> 5
    level = av1c[1] & 0x1F
    tier = "H" if av1c[2] & 0x80 else "M"
    high_bitdepth, twelve_bit = bool(av1c[2] & 0x40), bool(av1c[2] & 0x20)
    depth = 12 if twelve_bit else (10 if high_bitdepth else 8)
    return f"av01.{profile}.{level:02d}{tier}.{depth:02d}"


def codec_string_of(path) -> str:
    """The RFC 6381 video codec string of an MP4's first video stream (H.264, HEVC or AV1), read
    from its decoder configuration record; empty for other codecs."""
    import av

    from media.probe import _avc_codec_string

    with av.open(str(path)) as container:
        if not container.streams.video:
            return ""
        context = container.streams.video[0].codec_context
        extradata, name = context.extradata, context.name
    if name == "hevc":
        return hevc_codec_string(extradata)
    if extradata and extradata[:1] == b"\x81":  # av1C (decoded by libdav1d or libaom)
        return av1_codec_string(extradata)
    return _avc_codec_string(extradata)
