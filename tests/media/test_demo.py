"""Demo clip seeding for fresh installs."""

from media.demo import DEMO_CLIPS, seed_demo_clips
from media.probe import probe


def test_it_seeds_missing_clips_once(media_env):
    written = seed_demo_clips()
    assert sorted(written) == sorted(DEMO_CLIPS)
    portrait = probe(media_env.media_root / "videos/demo-portrait.mp4")
    assert (portrait.orientation, portrait.has_audio) == ("portrait", True)
    assert probe(media_env.media_root / "videos/demo-silent.mp4").has_audio is False
    assert (media_env.media_root / "playback").is_dir()
    assert seed_demo_clips() == []
    assert not list(media_env.media_root.rglob(".*partial*"))
