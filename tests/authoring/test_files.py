"""``atomic_path`` (``dagster_graphbook/authoring/files.py``), the ``dump_fn`` file helper, with a
final path in a bucket: moto's S3 server on 127.0.0.1, s3fs as the fsspec driver."""

from __future__ import annotations

import os

import pytest

from dagster_graphbook.authoring.files import atomic_path, recording_files
from dagster_graphbook.execution.pools.dump_pool import _written


def test_atomic_path_uploads_to_a_bucket_once_the_file_is_complete(bucket):
    """The block writes a local file; the object appears only once the block succeeds, is
    recorded as the call's file with the size it uploaded (the bucket's, asked nothing more),
    and a failed block uploads nothing (an earlier object stays)."""
    url = f"{bucket.url}/outputs/circle/img_0001.png"
    with recording_files() as written:
        with atomic_path(url) as tmp:
            assert not tmp.startswith("s3:") and os.path.isfile(tmp)
            with open(tmp, "wb") as f:
                f.write(b"first half ")
                assert bucket.objects() == {}  # nothing in the bucket while it is written
                f.write(b"second half")
        assert not os.path.exists(tmp)
    assert written == [(url, 22)]
    assert bucket.objects() == {"outputs/circle/img_0001.png": 22}
    assert _written(None, written) == [(url, 22)]  # files_written, files_bytes

    with pytest.raises(RuntimeError, match="encoder failed"):
        with atomic_path(url) as tmp:
            with open(tmp, "wb") as f:
                f.write(b"a partial copy")
            raise RuntimeError("encoder failed")
    assert not os.path.exists(tmp)
    assert bucket.fs.cat_file(f"{bucket.name}/outputs/circle/img_0001.png") == (
        b"first half second half"
    )


def test_atomic_path_to_a_missing_bucket_fails_naming_the_url(bucket):
    """An upload the store refuses (no such bucket) raises naming the URL, and creates no
    bucket on the way."""
    url = f"s3://{bucket.name}-missing/outputs/a.png"
    with pytest.raises(OSError, match=f"cannot write {url}"):
        with atomic_path(url) as tmp:
            with open(tmp, "wb") as f:
                f.write(b"png")
    assert not bucket.fs.exists(f"{bucket.name}-missing")
