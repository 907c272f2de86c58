"""The report's Sharding section (report/dtune_report/shard_report.py) on results the real
dtune-train wrote (tiny GPT, 2 ranks, 2 measured steps): per model and ranks, each configuration's
shard modes side by side with the values of the files (state mean over ranks, the largest rank's
peak, the all-gather's bytes), the state against DDP's of the same configuration (exactly 1/2 for
zero1 on 2 ranks; none without a DDP run), the figure, and the section, its summary link and the
`sharding` column of the study's table present exactly when a run is sharded."""

import h5py
import numpy as np
import pytest
from test_train_results import run

from dtune_report.report import build_report
from dtune_report.shard_report import MIB, load_shard_runs, shard_section, shard_tables

GPT = ["--model", "gpt2-tiny", "--context", "16", "--vocab", "128", "--threads", "1"]
STEPS = ["--steps", "2", "--warmup-steps", "1"]
# (file stem, extra flags): DDP and both ZeRO stages at batch 2, zero1 alone at batch 4.
RUNS = [
    ("none", ["--batch", "2"]),
    ("zero1", ["--batch", "2", "--shard", "zero1"]),
    ("zero2", ["--batch", "2", "--shard", "zero2"]),
    ("zero3", ["--batch", "2", "--shard", "zero3"]),
    ("zero1-b4", ["--batch", "4", "--shard", "zero1"]),
]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("shard")
    for stem, extra in RUNS:
        r = run(GPT + STEPS + extra + ["--output", d / f"{stem}.h5"], np_=2)
        assert r.returncode == 0, r.stdout + r.stderr
    return d


def recorded(path) -> dict:
    with h5py.File(path) as f:
        (g,) = f["runs"].values()
        return {
            "shard": g.attrs["shard"],
            "parameters": int(g.attrs["parameters"]),
            "gathered": int(g.attrs["gathered_bytes_per_step"]),
            "state": g["optimizer_state_bytes"][()],
            "peak": g["peak_memory_bytes"][()],
            "held": g["param_bytes_resident"][()] + g["grad_bytes_resident"][()] + g["optimizer_state_bytes"][()],
            "working": g["param_bytes_peak"][()] + g["grad_bytes_peak"][()] + g["optimizer_state_bytes"][()],
        }


def test_the_table_holds_each_modes_recorded_values_and_the_state_against_ddp(results):
    files = {stem: recorded(results / f"{stem}.h5") for stem, _ in RUNS}
    for stem, x in files.items():
        assert x["state"].shape == (2,) and x["state"].dtype == np.int64 and (x["state"] > 0).all(), stem
        assert x["shard"] == stem.split("-")[0]
    r = build_report([results], results / "report")
    (study,) = r["studies"]
    ((model, ranks, t),) = shard_tables([study], load_shard_runs([results]))
    assert (model, ranks) == ("gpt2-tiny", "2")
    # One row per configuration, DDP first within one; the batch tells the two configurations apart.
    assert list(zip(t.configuration, t["shard"])) == [
        ("batch per rank 2", "none"),
        ("batch per rank 2", "zero1"),
        ("batch per rank 2", "zero2"),
        ("batch per rank 2", "zero3"),
        ("batch per rank 4", "zero1"),
    ]
    for row, stem in zip(t.itertuples(), ["none", "zero1", "zero2", "zero3", "zero1-b4"]):
        x = files[stem]
        assert row.optimizer_state_mib == x["state"].mean() / MIB
        assert row.peak_memory_mib == x["peak"].max() / MIB
        assert row.gathered_mib == x["gathered"] / MIB
        assert row.held_mib == pytest.approx(x["held"].mean() / MIB, rel=1e-12)
        assert row.working_mib == x["working"].max() / MIB
    # What a rank holds between steps, against DDP: zero3 the least, within the 0.55x.
    held = dict(zip(t["shard"][:4], t.held_vs_ddp[:4]))
    assert held["none"] == 1.0 and held["zero3"] < held["zero2"] < held["zero1"] < 1.0
    assert held["zero3"] <= 0.55
    # At their peaks during the steps: DDP holds every gradient twice (.grad and its bucket), the
    # ZeRO stages less; zero1 exactly DDP's but for the state it halves.
    working = dict(zip(t["shard"][:4], t.working_vs_ddp[:4]))
    assert working["none"] == 1.0 and max(working["zero2"], working["zero3"]) < working["zero1"] < 1.0
    # Rank 0 receives the other rank's half of the fp32 parameters; DDP gathers nothing.
    assert files["none"]["gathered"] == 0
    for stem in ("zero1", "zero2"):
        assert files[stem]["gathered"] == files[stem]["parameters"] * 4 // 2
    # ZeRO-1 on 2 ranks keeps exactly half of DDP's sgd state (the state is the momentum buffer);
    # zero2 at most about half (its buckets padded to a multiple of the ranks); no DDP run at batch 4.
    ratio = dict(zip(t["shard"][:4], t.state_vs_ddp[:4]))
    assert ratio["none"] == 1.0 and ratio["zero1"] == 0.5
    assert ratio["zero2"] == files["zero2"]["state"].mean() / files["none"]["state"].mean()
    assert 0.5 <= ratio["zero2"] < 0.51
    # zero3 also keeps its fp32 master shard (the parameters' only copy): about DDP's momentum.
    assert 1.0 <= ratio["zero3"] < 1.02
    assert np.isnan(t.state_vs_ddp.iloc[4])


def test_the_section_its_figure_and_the_study_column_appear_with_a_sharded_run(results, tmp_path):
    r = build_report([results], tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "## Sharding" in md and "### gpt2-tiny on 2 rank(s)" in md, md
    assert "| 0.5x |" in md and "| - |" in md  # zero1's state against DDP; none for zero1 at batch 4
    png = r["figures"]["sharding_memory"]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    # The study table names the mode in its own column; the summary line links to the section.
    (study,) = r["studies"]
    assert [ax[0] for ax in study.axes] == ["batch", "shard"]
    assert "| batch per rank | sharding | samples/s |" in md, md
    summary = md.split("## Summary", 1)[1].split("\n## ", 1)[0]
    assert "(#sharding)" in summary, summary


def test_no_section_without_a_sharded_run(results, tmp_path):
    ddp = tmp_path / "ddp"
    ddp.mkdir()
    (ddp / "none.h5").write_bytes((results / "none.h5").read_bytes())
    r = build_report([ddp], tmp_path / "out")
    assert "Sharding" not in (tmp_path / "out" / "report.md").read_text()
    assert "sharding_memory" not in r["figures"]
    assert shard_section(r["studies"], [ddp], tmp_path) == []
