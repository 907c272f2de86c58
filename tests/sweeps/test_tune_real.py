"""A real small tune: dtune-train's tiny GPT on 2 ranks over 4 candidates (precision x gradient
bucket), 2 rungs (4 x 4 steps, then the better ones x 8 steps), end to end: the state log, the
merged results, tune.json, the recommendation and the report's "How the budget was spent"."""

import json
import subprocess
from pathlib import Path

import h5py

REPO = Path(__file__).resolve().parents[2]
DTUNE = [str(REPO / "scripts" / "dtune")]

SPACE = """
name: tiny-gpt
binary: dtune-train
args: [--model, gpt2-tiny, --context, 32, --batch, 2, --warmup-steps, 1, --threads, 1]
steps: 8
axes: {--precision: [fp32, bf16]}
zip:
  - {--bucket-mb: [0.25, 25], --first-bucket-mb: [0.25, 1]}
constraints: ["--first-bucket-mb <= --bucket-mb"]
launch: {ranks: 2}
"""


def check_tune(out: Path, stdout: str) -> dict:
    """What every real small tune must leave behind; returns its record."""
    (rec,) = json.loads((out / "tune.json").read_text())["sweeps"]
    assert [r["steps"] for r in rec["rungs"]] == [4, 8], rec["rungs"]
    assert [s["candidates"] for s in rec["schedule"]] == [4, 2]
    first, top = rec["rungs"]
    assert len(first["candidates"]) == 4 and all(c["status"] == "ok" for c in first["candidates"]), first
    promoted = {c["candidate_id"] for c in first["candidates"] if c["promoted"]}
    assert 2 <= len(top["candidates"]) <= 4 and promoted == {c["candidate_id"] for c in top["candidates"]}
    assert top["blocks"] == 3 and first["blocks"] == 1  # the top rung: 3 paired blocks
    w = rec["winner"]
    assert w["lo"] <= w["median"] <= w["hi"] and w["n"] % 8 == 0 and w["n"] >= 3 * 8
    assert {"ratio", "lo", "hi", "p", "significant"} <= set(rec["margin"])
    assert "Best: " in stdout
    with h5py.File(out / "merged.h5") as h:
        assert len(h["runs"]) == rec["spent_runs"] == len(first["order"]) + len(top["order"])
    states = [json.loads(x) for log in sorted(out.glob("state*.jsonl")) for x in log.read_text().splitlines()]
    ok = [s["id"] for s in states if s["event"] == "finished" and s["status"] == "ok"]
    assert len(ok) == len(set(ok)) == rec["spent_runs"]  # every run once
    return rec


def test_real_small_tune_end_to_end(tmp_path):
    f = tmp_path / "tiny.yaml"
    f.write_text(SPACE)
    out = tmp_path / "out"
    r = subprocess.run(DTUNE + ["tune", str(f), "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = check_tune(out, r.stdout)
    w, rc = rec["winner"], rec["recommendation"]
    assert f"--precision {w['values']['--precision']}" in rc["flags"]
    assert f"export DTUNE_TRAIN_PRECISION={w['values']['--precision']}" in rc["export"]
    assert "export DTUNE_TRAIN_BUCKET_MB=" in r.stdout
    md = (out / "report" / "report.md").read_text()
    assert "## How the budget was spent" in md and "export DTUNE_TRAIN_PRECISION=" in md
    assert "report.html" in r.stdout


SHARD_SPACE = """
name: tiny-gpt-shard
binary: dtune-train
args: [--model, gpt2-tiny, --context, 32, --batch, 2, --warmup-steps, 1, --threads, 1]
steps: 8
axes: {--shard: [none, zero1, zero2, zero3]}
launch: {ranks: 2}
"""


def test_real_tune_over_the_shard_modes(tmp_path):
    """dtune tune searches --shard as any other axis: every mode runs (zero3 records its units and
    prefetch), and the pick is exported as DTUNE_TRAIN_SHARD."""
    f = tmp_path / "shard.yaml"
    f.write_text(SHARD_SPACE)
    out = tmp_path / "out"
    r = subprocess.run(
        DTUNE + ["tune", str(f), "--out", str(out), "--no-report"], capture_output=True, text=True, timeout=900
    )
    assert r.returncode == 0, r.stdout + r.stderr
    rec = check_tune(out, r.stdout)
    mode = rec["winner"]["values"]["--shard"]
    assert f"export DTUNE_TRAIN_SHARD={mode}" in r.stdout and f"--shard {mode}" in rec["recommendation"]["flags"]
    with h5py.File(out / "merged.h5") as h:
        shards = {g.attrs["shard"] for g in h["runs"].values()}
        assert shards == {"none", "zero1", "zero2", "zero3"}, shards
        for g in h["runs"].values():
            assert ("shard_unit" in g.attrs) == (g.attrs["shard"] == "zero3")
