"""The split params of POST /v2/jobs (issue 33): `split` and `chunk_seconds` on the types that can
split, 422 naming the field otherwise; the job detail's `split` is null for a job not split."""

import pytest
from django.test import override_settings

from tests.api.test_jobs import fields_of
from tests.kit.media import MediaRoots

pytestmark = pytest.mark.django_db


@pytest.fixture
def source(tmp_path, clips_dir):
    roots = MediaRoots.under(tmp_path)
    (roots.media / "src").mkdir()
    (roots.media / "src" / "a.mp4").write_bytes((clips_dir / "landscape.mp4").read_bytes())
    with override_settings(MEDIA_ROOT_DIR=roots.media):
        yield "src/a.mp4"


@pytest.fixture(scope="module")
def clips_dir(tmp_path_factory):
    from tests.kit.media import generate_clips

    out = tmp_path_factory.mktemp("split-api-clips")
    generate_clips(out, {"landscape.mp4": {"width": 320, "height": 180, "seconds": 1.0, "audio": False}})
    return out


@pytest.mark.parametrize("job_type", ["transcode", "reencode_streaming"])
@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"chunk_seconds": 1}, "params.chunk_seconds"),
        ({"chunk_seconds": 601}, "params.chunk_seconds"),
        ({"chunk_seconds": "soon"}, "params.chunk_seconds"),
        ({"split": "sometimes"}, "params.split"),
        ({"split": None}, "params.split"),
    ],
)
def test_out_of_range_split_params_are_422_naming_the_field(operator_api, source, job_type, params, field):
    response = operator_api.post("/v2/jobs", {"type": job_type, "params": {"input": source, **params}})
    assert fields_of(response) == [field]


@pytest.mark.parametrize("job_type", ["compile_gif", "thumbnail_generate", "scene_extract"])
def test_split_on_a_type_that_cannot_split_is_422_naming_split(operator_api, source, job_type):
    response = operator_api.post(
        "/v2/jobs", {"type": job_type, "params": {"input": source, "split": "chunks"}}
    )
    assert fields_of(response) == ["params.split"]
    assert "cannot split" in response.json()["errors"][0]["message"]


def test_reencode_streaming_takes_split_chunks(operator_api, source):
    params = {"input": source, "split": "chunks", "chunk_seconds": 10}
    response = operator_api.post("/v2/jobs", {"type": "reencode_streaming", "params": params})
    assert response.status_code == 201, response.content
    assert response.json()["params"]["split"] == "chunks"
