"""Locating FFmpeg and the capability catalog."""

import os
import stat
import sys
import textwrap

import pytest

from media import ffmpeg as ff


def test_it_finds_an_ffmpeg_without_configuration(settings):
    settings.FFMPEG_BINARY = ""
    path = ff.ffmpeg_path()
    assert os.access(path, os.X_OK)


def test_a_configured_binary_that_is_missing_is_an_error(settings, tmp_path):
    settings.FFMPEG_BINARY = str(tmp_path / "nope")
    with pytest.raises(ff.FFmpegNotFound, match="JETENCODE_FFMPEG"):
        ff.ffmpeg_path()


def test_catalog_lists_encoders_and_confirms_nothing_that_cannot_encode(settings):
    settings.FFMPEG_BINARY = ""
    catalog = ff.encoder_catalog()
    assert {"ffmpeg", "version", "encoders", "hardware_encoders", "hwaccels"} <= set(catalog)
    assert "libx264" in catalog["encoders"] and "aac" in catalog["encoders"]
    assert set(catalog["hardware_encoders"]) <= set(catalog["encoders"])
    # The test machine has no GPU or V4L2 encoder device: the listed wrappers must not be confirmed.
    for name in catalog["hardware_encoders_unconfirmed"]:
        assert ff.is_hardware_encoder(name)
    catalog["encoders"].append("mutated")
    assert "mutated" not in ff.encoder_catalog()["encoders"]  # callers get copies of the cache


FAKE = textwrap.dedent("""\
    #!{python}
    import sys
    args = sys.argv[1:]
    if "-encoders" in args:
        print("Encoders:\\n V..... = Video\\n ------\\n V....D libx264  libx264 H.264\\n"
              " V....D h264_nvenc  NVIDIA NVENC H.264 encoder\\n V....D hevc_nvenc  NVIDIA NVENC hevc\\n"
              " A....D aac  AAC")
    elif "-hwaccels" in args:
        print("Hardware acceleration methods:\\ncuda\\n")
    elif "-version" in args:
        print("ffmpeg version 9.9-fake Copyright")
    elif "h264_nvenc" in args:
        sys.exit(0)   # the fake 'GPU' can encode H.264...
    else:
        sys.exit(1)   # ...but not HEVC
""")


def test_hardware_encoders_are_confirmed_by_a_test_encode(settings, tmp_path):
    fake = tmp_path / "ffmpeg"
    fake.write_text(FAKE.format(python=sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    settings.FFMPEG_BINARY = str(fake)
    catalog = ff.encoder_catalog(refresh=True)
    assert catalog["ffmpeg"] == str(fake.resolve())
    assert catalog["version"] == "9.9-fake"
    assert catalog["encoders"] == ["aac", "h264_nvenc", "hevc_nvenc", "libx264"]
    assert catalog["hardware_encoders"] == ["h264_nvenc"]
    assert catalog["hardware_encoders_unconfirmed"] == ["hevc_nvenc"]
    assert catalog["hwaccels"] == ["cuda"]
    assert ff.preferred_h264_hardware_encoder(catalog) == "h264_nvenc"


def test_confirmation_argv_sets_up_vaapi():
    argv = ff.confirmation_argv("ffmpeg", "h264_vaapi")
    assert argv[argv.index("-vaapi_device") + 1] == ff.VAAPI_DEVICE
    assert "format=nv12,hwupload" in argv
