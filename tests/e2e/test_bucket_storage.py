"""The nightly demo with its inputs, notes and outputs in a bucket: a real S3-compatible server
(moto's server mode on 127.0.0.1, s3fs as the fsspec driver), ``ClassifyShapes`` sharded 2 ways
on the multiprocess executor (each step and shard a process of its own, reaching the bucket
through ``AWS_ENDPOINT_URL``). The day gives what the same day gives with local storage, and
nothing of its notes is written to local disk."""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path
from typing import Any, Counter, Dict

import dagster as dg
import pandas as pd

from tests.support.network import free_port
from tests.support.nightly import shapes_data
from tests.support.nodes import copy_nodes
from tests.support.paths import REPO
from tests.support.s3 import Bucket, moto_server, s3_env
from tests.support.workflows import chain_workflow

WORKFLOW = REPO / "workflows" / "nightly_shapes.json"
NODES = REPO / "custom_nodes" / "nightly"
DAY = "2026-04-02"
IMAGES = 16


def _materialized(run: Any) -> Dict[str, Dict[str, Any]]:
    """The run's materializations: asset -> metadata values."""
    with dg.DagsterInstance.from_config(run.dagster_home) as instance:
        records = instance.get_records_for_run(
            run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
        ).records
    found = {}
    for record in records:
        m = record.asset_materialization
        assert m is not None
        found[m.asset_key.to_user_string()] = {k: v.value for k, v in m.metadata.items()}
    return found


def _localized(value: Any, bucket_root: str, local_root: str) -> Any:
    """``value`` with the bucket's URLs spelled as the local run's paths."""
    if isinstance(value, str):
        return value.replace(bucket_root, local_root)
    if isinstance(value, dict):
        return {k: _localized(v, bucket_root, local_root) for k, v in value.items()}
    if isinstance(value, list):
        return [_localized(v, bucket_root, local_root) for v in value]
    return value


def test_nightly_day_in_a_bucket_gives_the_local_days_notes_and_files(
    project, tmp_path, run_wf, bucket
):
    local = tmp_path / "local"
    folder = shapes_data().make_day(local / "incoming", DAY, IMAGES)
    for image in folder.iterdir():  # the day's images and labels.csv, uploaded
        bucket.fs.put_file(str(image), f"{bucket.name}/incoming/{DAY}/{image.name}")
    checkpoint = str(project["root"] / "models" / "shapes_cnn.pt")

    def run(root: str, notes_dir: str) -> Any:
        result = run_wf(
            WORKFLOW,
            [NODES],
            {
                "IncomingImages.folder": f"{root}/incoming/{DAY}",
                "ShapesModel.checkpoint": checkpoint,
                "SaveResized.output_dir": f"{root}/outputs",
            },
            executor="multiprocess",
            shards={"ClassifyShapes": 2},
            notes_dir=notes_dir,
        )
        assert result.success, result.failure
        return result

    on_disk = run(str(local), str(local / "notes"))
    in_bucket = run(bucket.url, f"{bucket.url}/notes")
    meta, on_disk_meta = _materialized(in_bucket), _materialized(on_disk)

    assert in_bucket.counts()["ClassifyShapes"]["out"] == IMAGES
    assert _localized(in_bucket.notes, bucket.url, str(local)) == on_disk.notes
    assert all(
        n["image"].startswith(f"{bucket.url}/incoming/") for n in in_bucket["IncomingImages"]["out"]
    )

    # the resized copies: the same files, bytes for bytes, recorded with their sizes
    objects = bucket.objects()
    copies = {
        k[len("outputs/") :]: bucket.fs.cat_file(f"{bucket.name}/{k}")
        for k in objects
        if k.startswith("outputs/")
    }
    on_disk_copies = {
        str(p.relative_to(local / "outputs")): p.read_bytes()
        for p in (local / "outputs").rglob("*.png")
    }
    assert copies == on_disk_copies and len(copies) == len(on_disk["SaveResized"]["out"]) > 0
    saved = meta["nightly_shapes/SaveResized"]
    assert saved["files_written"] == len(copies)
    assert saved["files_bytes"] == sum(objects[f"outputs/{name}"] for name in copies)
    # the manifest is beside the step's notes in the bucket (before: on the node that ran it)
    assert saved["files_manifest"] == f"{saved['dagster/uri'].removesuffix('.pkl')}.files.json"
    assert saved["files_manifest"].startswith(f"{bucket.url}/notes/nightly_shapes/SaveResized/")
    manifest = json.loads(bucket.fs.cat_file(saved["files_manifest"]))
    assert manifest["root"] == f"{bucket.url}/outputs"
    assert {e["path"]: e["bytes"] for e in manifest["files"]} == {
        name: objects[f"outputs/{name}"] for name in copies
    }

    # the notes: every stored version and the sink tables are objects in the bucket
    for key, values in meta.items():
        if "dagster/uri" in values:
            assert values["dagster/uri"].startswith(f"{bucket.url}/notes/"), key
    for key in ("nightly_shapes/ReviewSplit/review", "nightly_shapes/SaveResized"):
        table = meta[key]["table_path"]
        assert table.startswith(f"{bucket.url}/notes/")
        rows = pd.read_parquet(table).to_dict("records")  # read from the bucket
        on_disk_rows = pd.read_parquet(on_disk_meta[key]["table_path"]).to_dict("records")
        assert _localized(rows, bucket.url, str(local)) == on_disk_rows and rows
    # the step's preview: thumbnails of the notes' images, opened from the bucket
    classify = "nightly_shapes/ClassifyShapes"
    assert meta[classify]["preview"] == on_disk_meta[classify]["preview"]
    assert meta[classify]["preview"].count("data:image/jpeg;base64,") == 12
    stored = [k for k in objects if k.startswith("notes/")]
    assert any(k.startswith("notes/.step_outputs/") for k in stored)  # the shards' results
    # ... and nothing of them on local disk: no notes, tables or intermediates in the instance
    home = Path(in_bucket.dagster_home or "")
    assert not [p for p in home.rglob("*") if p.suffix in (".pkl", ".parquet", ".json")]
    assert not [k for k in objects if ".tmp-" in k]  # no temporary objects: uploads are whole


_REQUEST = re.compile(r"(GET|PUT|HEAD|POST|DELETE) /\S* HTTP/1\.1")


def _requests(log: Path) -> Counter[str]:
    """The requests moto's server logged (werkzeug's access log), by method."""
    return collections.Counter(m.group(1) for m in _REQUEST.finditer(log.read_text()))


def test_a_bucketed_nightly_day_costs_three_requests_per_image(
    project, tmp_path, run_wf, monkeypatch
):
    """Per image, the demo reads it twice (ClassifyShapes' loader, SaveResized's dump) and
    writes its resized copy once, each in one request: no HEAD before a read, no folder made or
    object looked up before or after a write (the copy's size comes from one listing of its
    folder). Counted by the server, as the difference between a day of 12 images and one of
    36 (the steps' own requests, notes and previews, are the same in both)."""
    checkpoint = str(project["root"] / "models" / "shapes_cnn.pt")
    log = tmp_path / "moto.log"
    with moto_server(log) as endpoint:
        s3_env(monkeypatch, endpoint)
        import s3fs

        bucket = Bucket("nightly", endpoint, s3fs.S3FileSystem(skip_instance_cache=True))
        bucket.fs.mkdir(bucket.name)
        counted = {}
        for images in (12, 36):
            day = f"2026-05-{images // 12:02d}"
            folder = shapes_data().make_day(tmp_path / "incoming", day, images)
            for image in folder.iterdir():
                bucket.fs.put_file(str(image), f"{bucket.name}/incoming/{day}/{image.name}")
            before = _requests(log)
            result = run_wf(
                WORKFLOW,
                [NODES],
                {
                    "IncomingImages.folder": f"{bucket.url}/incoming/{day}",
                    "ShapesModel.checkpoint": checkpoint,
                    "ReviewSplit.threshold": 0.0,  # every image on to SaveResized
                    "SaveResized.output_dir": f"{bucket.url}/outputs/{day}",
                },
                notes_dir=f"{bucket.url}/notes/{day}",
            )
            assert result.success, result.failure
            assert len(result["SaveResized"]["out"]) == images
            counted[images] = _requests(log) - before
        per_image = {
            method: (counted[36][method] - counted[12][method]) / 24
            for method in set(counted[36]) | set(counted[12])
        }
        assert {m: n for m, n in per_image.items() if n} == {"GET": 2.0, "PUT": 1.0}, counted
        # the copies recorded with their sizes as the bucket holds them
        saved = _materialized(result)["nightly_shapes/SaveResized"]
        assert saved["files_written"] == 36
        assert saved["files_bytes"] == sum(bucket.objects(f"outputs/{day}").values()) > 0


def test_a_bucketed_days_batch_steps_keep_many_requests_in_flight(
    project, tmp_path, run_wf, bucket, monkeypatch
):
    """A bucket 50 ms away (a proxy of the test's own in front of moto's server): the demo's
    batch steps keep many requests in flight, not one per worker (2 loader and 2 dump workers,
    runtime.io_concurrency 32): at least 16 whole-object reads at once (the loaders'; a
    preview's reads are ranged) and 16 writes (the dumps'; notes are written one at a time).
    Counted at the proxy, not timed. Every image is read once by each of the two steps and
    every copy written once: nothing retried or read twice."""
    from tests.latency_proxy import latency_proxy

    images, day = 64, "2026-05-09"
    folder = shapes_data().make_day(tmp_path / "incoming", day, images)
    for image in folder.iterdir():  # straight to the server, not through the proxy
        bucket.fs.put_file(str(image), f"{bucket.name}/incoming/{day}/{image.name}")
    with latency_proxy(bucket.endpoint, 50) as proxy:
        s3_env(monkeypatch, proxy.endpoint)
        result = run_wf(
            WORKFLOW,
            [NODES],
            {
                "IncomingImages.folder": f"{bucket.url}/incoming/{day}",
                "ShapesModel.checkpoint": str(project["root"] / "models" / "shapes_cnn.pt"),
                "ReviewSplit.threshold": 0.0,  # every image on to SaveResized
                "SaveResized.output_dir": f"{bucket.url}/outputs/{day}",
            },
            notes_dir=f"{bucket.url}/notes",
        )
        stats = proxy.stats()
    assert result.success, result.failure
    most = stats["max_in_flight_by"]
    assert most["GET bytes=0-"] >= 16 and most["PUT"] >= 16, most
    counted = stats["by_request"]
    reads = {k: n for k, n in counted.items() if k.startswith("GET ") and k.endswith(" bytes=0-")}
    writes = {k: n for k, n in counted.items() if k.startswith(f"PUT /{bucket.name}/outputs/")}
    assert len(reads) == images and set(reads.values()) == {2}, reads
    assert len(writes) == images and set(writes.values()) == {1}, writes
    assert len(bucket.objects(f"outputs/{day}")) == images
    # the loaders' preview: its 12 reads, at once in the step process once its forked workers
    # ended, each made (none waited out the preview's timeout)
    preview = _materialized(result)["nightly_shapes/ClassifyShapes"]["preview"]
    assert preview.count("data:image/jpeg;base64,") == 12, preview[-300:]


def test_an_unreachable_or_missing_bucket_fails_the_step_naming_the_url_and_loses_nothing(
    tmp_path, run_wf, bucket, monkeypatch
):
    """A run whose bucket cannot be reached (nothing listens at the endpoint), then one whose
    bucket does not exist: each fails the step that stores its notes, naming the notes' URL, and
    the notes an earlier run committed stay as they were (no object deleted, changed or added);
    no bucket is created on the way."""
    nodes = copy_nodes(tmp_path / "nodes", "chain_nodes.py", "chain")
    workflow = chain_workflow(tmp_path, 3, "chain")
    notes = f"{bucket.url}/notes"
    first = run_wf(workflow, [nodes], notes_dir=notes)
    assert first.success, first.failure
    committed = {k: bucket.fs.cat_file(f"{bucket.name}/{k}") for k in bucket.objects()}
    assert sorted(committed) == [
        f"notes/chain/{name}"
        for name in (
            f"Inc_1/{first.run_id}.pkl",
            f"Inc_2/{first.run_id}.parquet",  # the sink's table
            f"Inc_2/{first.run_id}.pkl",
            f"Start/{first.run_id}.pkl",
        )
    ]

    s3_env(monkeypatch, f"http://127.0.0.1:{free_port()}")  # nothing listens there
    down = run_wf(workflow, [nodes], notes_dir=notes)
    assert not down.success
    assert f"cannot write {notes}/chain/Start/{down.run_id}.pkl" in (down.failure or "")

    s3_env(monkeypatch, bucket.endpoint)
    missing = f"s3://{bucket.name}-missing/notes"
    refused = run_wf(workflow, [nodes], notes_dir=missing)
    assert not refused.success
    assert f"cannot write {missing}/chain/Start/{refused.run_id}.pkl" in (refused.failure or "")
    assert not bucket.fs.exists(f"{bucket.name}-missing")

    assert {k: bucket.fs.cat_file(f"{bucket.name}/{k}") for k in bucket.objects()} == committed


READ_ONLY = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Action": ["s3:GetObject", "s3:ListBucket"], "Resource": "*"}
    ],
}
READ_WRITE = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
}


def test_a_bucket_that_denies_writes_fails_the_step_naming_the_url_and_loses_nothing(
    project, tmp_path, run_wf, monkeypatch
):
    """moto with IAM enforced: a user whose policy only reads. Its run fails the step that
    stores notes, naming the URL, and the notes a writer committed stay as they were."""
    import boto3
    import requests
    import s3fs

    nodes = copy_nodes(tmp_path / "nodes", "chain_nodes.py", "chain")
    workflow = chain_workflow(tmp_path, 3, "chain")
    with moto_server() as endpoint:
        s3_env(monkeypatch, endpoint)
        iam = boto3.client("iam", endpoint_url=endpoint)
        keys = {}
        for user, policy in (("writer", READ_WRITE), ("reader", READ_ONLY)):
            iam.create_user(UserName=user)
            iam.put_user_policy(UserName=user, PolicyName="s3", PolicyDocument=json.dumps(policy))
            key = iam.create_access_key(UserName=user)["AccessKey"]
            keys[user] = (key["AccessKeyId"], key["SecretAccessKey"])
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="nightly")
        requests.post(f"{endpoint}/moto-api/reset-auth", data=b"0", timeout=10)  # IAM from now

        def as_user(user: str) -> Any:
            monkeypatch.setenv("AWS_ACCESS_KEY_ID", keys[user][0])
            monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", keys[user][1])
            s3fs.S3FileSystem.clear_instance_cache()
            return s3fs.S3FileSystem(skip_instance_cache=True)

        def objects(fs: Any) -> Dict[str, bytes]:
            return {k: fs.cat_file(k) for k in fs.find("nightly")}

        notes = "s3://nightly/notes"
        as_user("writer")
        first = run_wf(workflow, [nodes], notes_dir=notes)
        assert first.success, first.failure
        committed = objects(as_user("writer"))
        assert len(committed) == 4

        as_user("reader")
        denied = run_wf(workflow, [nodes], notes_dir=notes)
        assert not denied.success
        assert f"cannot write {notes}/chain/Start/{denied.run_id}.pkl" in (denied.failure or "")
        assert "PermissionError: Access Denied" in (denied.failure or "")
        assert objects(as_user("writer")) == committed

        # credentials the bucket does not know: s3fs's error names no object; the failure
        # names the folder the demo's source was listing
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "no-such-key")
        s3fs.S3FileSystem.clear_instance_cache()
        incoming = "s3://nightly/incoming/2026-04-02"
        stranger = run_wf(
            WORKFLOW,
            [NODES],
            {
                "IncomingImages.folder": incoming,
                "ShapesModel.checkpoint": str(project["root"] / "models" / "shapes_cnn.pt"),
                "SaveResized.output_dir": "s3://nightly/outputs",
            },
            notes_dir=notes,
        )
        assert not stranger.success
        failure = stranger.failure or ""
        assert "step 'IncomingImages'" in failure and "PermissionError" in failure, failure
        assert f"(at {incoming})" in failure, failure
