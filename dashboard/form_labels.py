"""Human labels for the create-job form's fields, from their params names ("min_vmaf" → "Minimum
VMAF", "crf" → "CRF"): pydantic's titles ("Min Vmaf", "Crf") capitalise words, not meanings."""

from __future__ import annotations

# Whole-name labels where the words alone would not say it.
LABELS = {
    "video_id": "Library video",
    "video_ids": "Library videos",
    "input": "Input path",
    "inputs": "Input paths",
    "input_url": "Input URL",
    "input_urls": "Input URLs",
    "ladder": "Ladder (renditions)",
    "quality_metrics": "Quality metrics",
    "vmaf_subsample": "VMAF: score every Nth frame",
    "thumbnail_at": "Thumbnail at (s)",
    "fail_attempts": "Fail the first N attempts",
    "seconds": "Seconds",
    "segment_seconds": "Segment length (s)",
}
# Words spelled as their field spells them: acronyms, units and abbreviations.
WORDS = {
    "crf": "CRF",
    "vmaf": "VMAF",
    "psnr": "PSNR",
    "ssim": "SSIM",
    "fps": "FPS",
    "gif": "GIF",
    "hls": "HLS",
    "id": "ID",
    "ids": "IDs",
    "min": "minimum",
    "max": "maximum",
    "kbps": "(kbit/s)",
    "mb": "(MB)",
    "seconds": "(s)",
    "vram": "VRAM",
}


def human_label(name: str) -> str:
    """The label a field named `name` gets: "min_vmaf" → "Minimum VMAF", "audio_bitrate_kbps" →
    "Audio bitrate (kbit/s)", "segment_seconds" → "Segment (s)"."""
    if name in LABELS:
        return LABELS[name]
    words = [WORDS.get(word, word) for word in name.split("_") if word]
    if not words:
        return name
    first = words[0]
    words[0] = first if first.isupper() or first.startswith("(") else first[:1].upper() + first[1:]
    return " ".join(words)
