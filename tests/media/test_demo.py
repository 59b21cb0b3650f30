"""Demo clip seeding for fresh installs."""

from media.demo import DEMO_CLIPS, seed_demo_clips
from media.probe import probe


def test_it_seeds_missing_clips_once(roots):
    written = seed_demo_clips()
    assert sorted(written) == sorted(DEMO_CLIPS)
    portrait = probe(roots.media / "videos/demo-portrait.mp4")
    assert (portrait.orientation, portrait.has_audio) == ("portrait", True)
    assert probe(roots.media / "videos/demo-silent.mp4").has_audio is False
    assert (roots.media / "playback").is_dir()
    assert seed_demo_clips() == []
    assert not list(roots.media.rglob(".*partial*"))
