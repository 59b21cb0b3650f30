"""Output storage: local atomic publication and S3 (moto's server as the S3 emulator)."""

import uuid

import boto3
import pytest

from media.storage import LocalStorage, S3Storage, get_storage


def test_local_publish_is_a_rename_into_the_job_directory(tmp_path):
    storage = LocalStorage(tmp_path / "out")
    job = str(uuid.uuid4())
    src = tmp_path / "ws" / "a.mp4"
    src.parent.mkdir()
    src.write_bytes(b"data")
    prepared = storage.prepare(job, src, "renditions/a.mp4")
    final = storage.path(job, "renditions/a.mp4")
    assert not final.exists()  # invisible until commit
    assert prepared.temp.startswith(str(final.parent)) and "/." in prepared.temp
    published = storage.commit(prepared)
    assert final.read_bytes() == b"data" and published.size_bytes == 4
    assert published.url == final.as_uri()
    assert [p.name for p in final.parent.iterdir()] == ["a.mp4"]  # no temporary left behind


def test_local_abort_publishes_nothing(tmp_path):
    storage = LocalStorage(tmp_path / "out")
    job = str(uuid.uuid4())
    src = tmp_path / "a.jpg"
    src.write_bytes(b"x")
    storage.abort(storage.prepare(job, src, "a.jpg"))
    assert list(storage.job_dir(job).iterdir()) == []
    with pytest.raises(ValueError):
        storage.prepare(job, src, "../escape.jpg")


def test_local_publish_can_move_the_source(tmp_path):
    storage = LocalStorage(tmp_path / "out")
    job = str(uuid.uuid4())
    src = tmp_path / "a.jpg"
    src.write_bytes(b"x")
    storage.publish(job, src, "thumb.jpg", move=True)
    assert not src.exists() and storage.exists(job, "thumb.jpg")


def test_default_storage_is_local_under_the_output_root(settings, tmp_path):
    settings.S3_BUCKET = ""
    settings.OUTPUT_ROOT_DIR = tmp_path
    storage = get_storage()
    assert isinstance(storage, LocalStorage)
    job = str(uuid.uuid4())
    assert storage.path(job, "x.mp4") == tmp_path / job / "x.mp4"


@pytest.fixture(scope="module")
def s3_endpoint():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_env(s3_endpoint, monkeypatch, settings):
    for name, value in {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    bucket = f"jet-{uuid.uuid4().hex[:8]}"
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    client.create_bucket(Bucket=bucket)
    settings.S3_BUCKET, settings.S3_ENDPOINT_URL, settings.S3_PREFIX = bucket, s3_endpoint, "outputs"
    return client, bucket


def test_s3_publish_via_settings(s3_env, tmp_path):
    client, bucket = s3_env
    storage = get_storage()
    assert isinstance(storage, S3Storage)
    job = str(uuid.uuid4())
    src = tmp_path / "index.m3u8"
    src.write_text("#EXTM3U\n")
    prepared = storage.prepare(job, src, "hls/index.m3u8")
    assert not storage.exists(job, "hls/index.m3u8")
    published = storage.commit(prepared)
    assert published.url == f"s3://{bucket}/outputs/{job}/hls/index.m3u8"
    obj = client.get_object(Bucket=bucket, Key=f"outputs/{job}/hls/index.m3u8")
    assert obj["Body"].read() == b"#EXTM3U\n"
    assert obj["ContentType"] == "application/vnd.apple.mpegurl"
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert keys == [f"outputs/{job}/hls/index.m3u8"]  # the temporary key is gone
    assert storage.download_url(job, "hls/index.m3u8").startswith("http")
    storage.delete_job(job)
    assert not storage.exists(job, "hls/index.m3u8")


def test_s3_abort_leaves_nothing(s3_env, tmp_path):
    client, bucket = s3_env
    storage = get_storage()
    src = tmp_path / "a.mp4"
    src.write_bytes(b"abc")
    storage.abort(storage.prepare(str(uuid.uuid4()), src, "a.mp4"))
    assert client.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
