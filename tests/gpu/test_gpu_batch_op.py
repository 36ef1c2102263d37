"""The batch op on a CUDA GPU (marked ``gpu``: skipped where NVML counts no GPU;
``benchmarks/gpu/device_check.sh`` runs them on a lent GPU machine).

The nightly demo through a real Dagster run on ``cuda`` gives the CPU run's labels; batches reach
the model on the GPU from pinned memory, and dump workers get CPU tensors; CUDA running out of
memory fails the step naming it and the batch size, and leaves the GPU usable; a sharded day
leases the GPU shard by shard.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

import dagster as dg
import pytest
import torch

from dagster_graphbook.authoring.steps import BatchStep
from dagster_graphbook.execution.batch.run import run_batch_step
from dagster_graphbook.execution.errors import GpuOutOfMemory
from dagster_graphbook.execution.pools import loader as loader_pool
from dagster_graphbook.plan.settings import BatchRuntime
from tests.support.paths import REPO

pytestmark = pytest.mark.gpu

WORKFLOW = REPO / "workflows" / "nightly_shapes.json"
NODES = REPO / "custom_nodes" / "nightly"


class DeviceProbe(BatchStep):
    """Records where each batch arrives; returns CUDA tensors for dump_fn, which writes what it
    got (device and values) to a file per item."""

    def __init__(self, batch_size=4, item_key="items", out=""):
        super().__init__(batch_size, item_key)
        self.out = out
        self.seen: List[str] = []

    @staticmethod
    def load_fn(item):
        return torch.full((3, 8, 8), float(item))

    def on_item_batch(self, outputs, items, notes):
        self.seen += [t.device.type for t in outputs]
        doubled = torch.stack(list(outputs)) * 2  # computed on the GPU
        return [(f"{self.out}/{item}.txt", doubled[i]) for i, item in enumerate(items)]

    @staticmethod
    def dump_fn(path, tensor):
        Path(path).write_text(f"{tensor.device.type} {tensor.mean().item():g}")


class Hungry(BatchStep):
    """Asks the GPU for 1 TiB per item: more than any GPU has."""

    def __init__(self, batch_size=4, item_key="items"):
        super().__init__(batch_size, item_key)

    @staticmethod
    def load_fn(item):
        return torch.zeros(2)

    def on_item_batch(self, outputs, items, notes):
        torch.empty(len(items) * 2**40, dtype=torch.uint8, device=self.device)


def test_batches_reach_the_model_on_the_gpu_from_pinned_memory_and_dumps_get_cpu_tensors(
    tmp_path, monkeypatch
):
    pinned: List[bool] = []
    real = loader_pool.LoadedBatch.outputs

    def outputs(self, device="cpu"):
        pinned.append(self.stacked is not None and self.stacked.is_pinned())
        return real(self, device)

    monkeypatch.setattr(loader_pool.LoadedBatch, "outputs", outputs)
    step = DeviceProbe(out=str(tmp_path))
    settings = BatchRuntime(num_workers=2, dump_workers=2, device="cuda")
    result = run_batch_step(step, [{"items": list(range(10))}], settings)
    assert step.seen == ["cuda"] * 10
    assert pinned == [True, True, True]  # 10 items in batches of 4: each stacked block pinned
    assert sorted(p.read_text() for p in tmp_path.glob("*.txt")) == sorted(
        f"cpu {2 * i:g}" for i in range(10)
    )
    assert result.stats["device"] == "cuda"


@pytest.mark.parametrize("on_item_error", ["raise", "skip"])
def test_cuda_out_of_memory_fails_the_step_naming_the_batch_size(on_item_error):
    with pytest.raises(GpuOutOfMemory) as info:
        run_batch_step(
            Hungry(batch_size=4),
            [{"items": list(range(6))}],
            BatchRuntime(num_workers=0, device="cuda", on_item_error=on_item_error),
            label="Hungry",
        )
    text = str(info.value)
    assert "CUDA ran out of memory in on_item_batch on a batch of 4 items" in text
    assert "batch_size 4, device cuda" in text and "GiB free on cuda:0" in text
    assert "lower batch_size" in text
    assert isinstance(info.value.__cause__, torch.cuda.OutOfMemoryError)
    # the GPU is still usable after the failed allocation
    assert torch.ones(1024, device="cuda").sum().item() == 1024


def _nightly_params(inputs: Dict[str, Any], out: Path, device: str) -> Dict[str, Any]:
    return {
        "IncomingImages.folder": str(inputs["incoming"] / inputs["day"]),
        "ShapesModel.checkpoint": str(inputs["checkpoint"]),
        "ShapesModel.device": device,
        "ClassifyShapes.runtime.device": device,
        "SaveResized.output_dir": str(out),
    }


def _classify_details(run) -> Dict[str, Any]:
    """The ``details`` of ClassifyShapes's materialization in this run (device, shards, lease)."""
    assert run.dagster_home is not None
    with dg.DagsterInstance.from_config(run.dagster_home) as instance:
        records = instance.get_records_for_run(
            run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
        ).records
    for record in records:
        m = record.asset_materialization
        if m is not None and m.asset_key.to_user_string() == "nightly_shapes/ClassifyShapes":
            return m.metadata["details"].value
    raise AssertionError(f"no ClassifyShapes materialization in run {run.run_id}")


def _labels(run) -> Dict[str, tuple]:
    notes = [n for pin in run["ClassifyShapes"].values() for n in pin]
    return {n["name"]: (n["label"], n["confidence"]) for n in notes}


def test_nightly_demo_runs_on_the_gpu_through_dagster_with_the_cpu_labels(
    nightly_inputs, run_wf, tmp_path
):
    runs = {}
    for device in ("cpu", "cuda"):
        runs[device] = run_wf(
            WORKFLOW,
            [NODES],
            _nightly_params(nightly_inputs, tmp_path / device, device),
            notes_dir=str(tmp_path / f"notes-{device}"),
        )
        assert runs[device].success, runs[device].failure
    assert _classify_details(runs["cuda"])["device"] == "cuda"
    assert _classify_details(runs["cpu"])["device"] == "cpu"
    cpu, gpu = _labels(runs["cpu"]), _labels(runs["cuda"])
    assert len(gpu) == nightly_inputs["count"] and gpu.keys() == cpu.keys()
    # cuDNN's convolutions (TF32 on Hopper) round differently from the CPU's: the briefly trained
    # CNN's confidences agree closely; a near-tie may flip one label of the 40
    differ = [k for k in cpu if cpu[k][0] != gpu[k][0]]
    assert len(differ) <= 1, differ
    assert max(abs(cpu[k][1] - gpu[k][1]) for k in cpu if k not in differ) < 5e-3
    # what was stored came back to the CPU: plain floats in the notes, files written
    assert all(isinstance(c, float) for _, c in gpu.values())
    assert sorted(p.name for p in (tmp_path / "cuda").rglob("*.png")) == sorted(
        p.name for p in (tmp_path / "cpu").rglob("*.png")
    )


def test_a_sharded_day_leases_the_gpu_shard_by_shard(nightly_inputs, run_wf, tmp_path):
    run = run_wf(
        WORKFLOW,
        [NODES],
        _nightly_params(nightly_inputs, tmp_path / "out", "cuda"),
        executor="multiprocess",
        shards={"ClassifyShapes": 2},
        notes_dir=str(tmp_path / "notes"),
    )
    assert run.success, run.failure
    details = _classify_details(run)
    assert details["shards"] == 2 and details["device"] == "cuda"
    with dg.DagsterInstance.from_config(run.dagster_home) as instance:
        said = [
            m.user_message
            for m in instance.all_logs(run.run_id)
            if "GPU lease" in m.user_message or "leased GPU" in m.user_message
        ]
    # each shard leased the machine's one GPU (one shard per GPU: the second waited its turn)
    assert details.get("gpus_leased") == "0", (details, said)
    assert len([m for m in said if "leased GPU 0" in m]) == 2, said
    assert len(_labels(run)) == nightly_inputs["count"]


def test_stored_notes_hold_cpu_tensors_where_a_step_left_cuda_ones():
    """A note holding a CUDA tensor is stored with its CPU copy: it opens on a machine without a
    GPU and holds no GPU memory; a view is stored as its own bytes."""
    from dagster_graphbook.store import codec

    batch = torch.arange(12.0, device="cuda").reshape(4, 3)
    note = {"embedding": batch[1], "nested": [(batch,)]}
    back = codec.loads(codec.dumps(note))
    assert back["embedding"].device.type == "cpu"
    assert torch.equal(back["embedding"], torch.tensor([3.0, 4.0, 5.0]))
    assert back["embedding"].untyped_storage().nbytes() == 3 * 4
    assert back["nested"][0][0].device.type == "cpu" and back["nested"][0][0].shape == (4, 3)
    assert note["embedding"].is_cuda  # the step's own note is left as it was


def test_cuda_counts_as_started_only_once_the_driver_is_initialized():
    """A shard's lease must come before CUDA starts in its process; importing torch (which loads
    the driver library on some builds) does not start it, a device query does."""
    import subprocess
    import sys

    code = (
        "import torch\n"
        "from dagster_graphbook.execution.ownership.leases import cuda_started\n"
        "before = cuda_started()\n"
        "torch.cuda.is_available()\n"
        "print(before, cuda_started())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "True"], done.stdout + done.stderr


def test_a_cuda_parameter_is_stored_as_a_cpu_parameter():
    from dagster_graphbook.store import codec

    layer = torch.nn.Linear(3, 2).cuda()
    back = codec.loads(codec.dumps(layer))
    assert isinstance(back.weight, torch.nn.Parameter) and back.weight.device.type == "cpu"
    assert torch.equal(back.weight, layer.weight.detach().cpu())
