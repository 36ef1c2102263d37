"""By-hand count: the metadata entries each nightly_shapes asset shows, per materialization and
on its definition, and how many of them the UI's Plots tab draws (the numeric ones).

    .venv/bin/python benchmarks/bench_asset_metadata.py [--images 60] [--threshold 0.6]

Not a test. Makes a day of images and a briefly trained checkpoint with the demo's own scripts
in a temporary folder, runs that day of ``workflows/nightly_shapes.json`` in process on a
temporary instance, reads the materializations back and prints one row per asset and each
asset's entries. ``--threshold`` (ReviewSplit's, lowered from 0.9 for the briefly trained model)
keeps notes on both of its pins, so every asset shows all the entries it can have.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import dagster as dg

REPO = Path(__file__).resolve().parent.parent
NIGHTLY = REPO / "examples" / "nightly"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=60)
    parser.add_argument("--day", default="2026-06-01")
    parser.add_argument("--threshold", type=float, default=0.6)
    args = parser.parse_args()
    from dagster_graphbook import GraphbookWorkflow, build_definitions, daily_partitions

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        incoming = root / "data" / "incoming"
        py = sys.executable
        subprocess.run(
            [py, NIGHTLY / "shapes_data.py", "--root", incoming, "--date", args.day]
            + ["--count", str(args.images)],
            check=True,
            capture_output=True,
        )
        checkpoint = root / "models" / "shapes_cnn.pt"
        subprocess.run(
            [py, NIGHTLY / "train_shapes_cnn.py", "--out", checkpoint]
            + ["--train-count", "600", "--epochs", "2"],
            check=True,
            capture_output=True,
        )
        defs = build_definitions(
            [
                GraphbookWorkflow(
                    REPO / "workflows" / "nightly_shapes.json",
                    custom_nodes=[REPO / "custom_nodes" / "nightly"],
                    partitions_def=daily_partitions("2026-01-01"),
                    executor="in_process",
                )
            ],
            notes_dir=str(root / "notes"),
        )
        os.chdir(root)  # the workflow's relative paths (data/, models/, outputs/)
        (root / "home").mkdir()
        with dg.DagsterInstance.from_config(str(root / "home")) as instance:
            split = {"config": {"threshold": args.threshold}}
            result = defs.resolve_job_def("nightly_shapes").execute_in_process(
                instance=instance,
                partition_key=args.day,
                run_config={"ops": {"nightly_shapes__ReviewSplit": split}},
            )
            assert result.success
            mats = {
                r.asset_materialization.asset_key: r.asset_materialization.metadata
                for r in instance.all_logs(
                    result.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
                )
            }
        specs = {s.key: s for s in defs.resolve_all_asset_specs()}
    numeric = (dg.IntMetadataValue, dg.FloatMetadataValue)
    rows = []
    for key, meta in sorted(mats.items(), key=lambda kv: kv[0].to_user_string()):
        plotted = sorted(k for k, v in meta.items() if isinstance(v, numeric))
        definition = len(specs[key].metadata) if key in specs else 0
        rows.append((key.to_user_string(), len(meta), len(plotted), definition, sorted(meta)))
    print("| asset | entries per materialization | plotted (numeric) | on the definition |")
    print("| --- | --- | --- | --- |")
    for name, total, n_plotted, definition, _ in rows:
        print(f"| {name} | {total} | {n_plotted} | {definition} |")
    total = sum(r[1] for r in rows)
    print(
        f"| all {len(rows)} assets | {total} ({total / len(rows):.1f} each) | "
        f"{sum(r[2] for r in rows)} | {sum(r[3] for r in rows)} |"
    )
    print()
    for name, _, _, _, keys in rows:
        count = mats[dg.AssetKey(name.split("/"))]["dagster/row_count"].value
        print(f"{name} ({count} notes): {', '.join(keys)}")
    for key, spec in sorted(specs.items(), key=lambda kv: kv[0].to_user_string()):
        print(f"{key.to_user_string()} definition: {', '.join(sorted(spec.metadata))}")


if __name__ == "__main__":
    main()
