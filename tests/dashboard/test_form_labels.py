"""The create-job form's labels in words (dashboard/form_labels.py)."""

from dashboard.form_labels import human_label


def test_labels_spell_acronyms_units_and_abbreviations_as_people_do():
    assert human_label("crf") == "CRF"
    assert human_label("min_vmaf") == "Minimum VMAF"
    assert human_label("target_vmaf") == "Target VMAF"
    assert human_label("audio_bitrate_kbps") == "Audio bitrate (kbit/s)"
    assert human_label("max_height") == "Maximum height"
    assert human_label("segment_seconds") == "Segment length (s)"
    assert human_label("video_id") == "Library video"
    assert human_label("preset") == "Preset"
