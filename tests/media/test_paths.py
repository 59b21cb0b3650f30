"""Path safety: what users may name as media inputs, checked at submission and in the worker."""

import os
import uuid

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from media.paths import (
    UnsafePathError,
    check_output_name,
    check_relative,
    job_output_dir,
    resolve_media_path,
    workspace_file,
)


@pytest.mark.parametrize(
    "bad, reason",
    [
        ("", "empty"),
        ("/etc/passwd", "absolute"),
        ("../secret.mp4", "'..'"),
        ("videos/../../secret.mp4", "'..'"),
        ("http://example.com/a.mp4", "URL"),
        ("file:/etc/passwd", "protocol"),
        ("concat:a.mp4|b.mp4", "protocol"),
        ("subfile,,start,0,end,10,,:a.mp4", "protocol"),
        ("data:video/mp4;base64,AAAA", "protocol"),
        ("-i.mp4", "'-'"),
        ("videos/-filter_complex", "'-'"),
        ("a\x00b.mp4", "NUL"),
        ("a\nb.mp4", "control"),
        ("videos\\a.mp4", "backslash"),
        ("~/a.mp4", "absolute"),
    ],
)
def test_it_refuses_unsafe_paths_with_a_clear_message(bad, reason, roots):
    with pytest.raises(UnsafePathError) as info:
        resolve_media_path(bad)
    assert reason in str(info.value)
    assert isinstance(info.value, ValueError)


def test_it_resolves_a_normal_path_inside_the_root(roots, clips):
    rel = roots.add(clips.landscape, "videos/a b:c.mp4")  # ':' after the first char is fine
    path = resolve_media_path(rel, must_exist=True, kind="file")
    assert path == (roots.media / "videos/a b:c.mp4").resolve()
    assert resolve_media_path("./videos//a b:c.mp4") == path


def test_it_refuses_a_symlink_that_escapes_the_root(roots, tmp_path):
    outside = tmp_path / "outside.mp4"
    outside.write_bytes(b"x")
    (roots.media / "videos").mkdir()
    os.symlink(outside, roots.media / "videos" / "link.mp4")
    os.symlink(tmp_path, roots.media / "escape_dir")
    with pytest.raises(UnsafePathError, match="outside the media root"):
        resolve_media_path("videos/link.mp4")
    with pytest.raises(UnsafePathError, match="outside the media root"):
        resolve_media_path("escape_dir/outside.mp4")


def test_a_symlink_inside_the_root_is_allowed(roots, clips):
    roots.add(clips.landscape, "videos/real.mp4")
    os.symlink(roots.media / "videos" / "real.mp4", roots.media / "alias.mp4")
    assert resolve_media_path("alias.mp4", must_exist=True).name == "real.mp4"


def test_must_exist_and_kind_are_checked(roots, clips):
    (roots.media / "dir").mkdir()
    with pytest.raises(UnsafePathError, match="does not exist"):
        resolve_media_path("missing.mp4", must_exist=True)
    with pytest.raises(UnsafePathError, match="not a regular file"):
        resolve_media_path("dir", kind="file")
    roots.add(clips.landscape, "file.mp4")
    with pytest.raises(UnsafePathError, match="not a directory"):
        resolve_media_path("file.mp4", kind="dir")


def test_output_names_and_job_dirs_stay_under_the_output_root(roots):
    assert check_output_name("hls/720p/index.m3u8") == "hls/720p/index.m3u8"
    for bad in ("../x", "/abs", ".hidden", "a/.tmp/b", "-x"):
        with pytest.raises(UnsafePathError):
            check_output_name(bad)
    job = uuid.uuid4()
    assert job_output_dir(str(job)) == roots.outputs.resolve() / str(job)
    with pytest.raises(ValueError):
        job_output_dir("../../etc")


def test_workspace_paths_stay_in_the_workspace(tmp_path):
    assert workspace_file(tmp_path, "input/source.mp4") == (tmp_path / "input/source.mp4").resolve()
    with pytest.raises(UnsafePathError):
        workspace_file(tmp_path, "../other/source.mp4")


@hsettings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=40))
def test_any_string_is_refused_or_lands_inside_the_root(roots, text):
    try:
        path = resolve_media_path(text)
    except UnsafePathError:
        return
    root = roots.media.resolve()
    assert path.is_relative_to(root)
    clean = check_relative(text)
    assert not any(part.startswith("-") or part == ".." for part in clean.parts)
    assert ":" not in clean.parts[0]
