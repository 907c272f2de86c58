"""dtune tune on a synthetic objective (fake_train.py installed as dtune-train, fake_mpirun.sh as
mpirun): known optimum, exact ties and seeded noise, so every property is deterministic. Halving
finds the optimum, keeps to a budget of runs, promotes ties together, never reruns a failed point,
and resumes after a kill -9 of the tuner without repeating a finished run, deciding as an
uninterrupted tune does. Bad input exits 2 with one message before anything runs."""

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from fake_train_bin import install_fake_train

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DTUNE = [str(REPO / "scripts" / "dtune")]

SPACE = """
name: fake
binary: dtune-train
args: [--warmup-steps, 1, --sleep-ms, 1]
steps: 16
axes: {{--x: [{xs}], --z: [0, 1]}}
"""


@pytest.fixture
def fake(tmp_path):
    """An environment whose dtune-train is the synthetic one and whose mpirun starts it directly."""
    bindir = install_fake_train(tmp_path)
    return {**os.environ, "DTUNE_BIN_DIR": str(bindir), "DTUNE_MPIRUN": str(HERE / "fake_mpirun.sh")}


def write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def dtune(*args, env=None, timeout=600):
    return subprocess.run(DTUNE + [str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env)


def launches(out: Path) -> Counter:
    """How often each distinct argument list was launched."""
    f = out / "launches.log"
    return Counter(f.read_text().splitlines()) if f.exists() else Counter()


def record(out: Path) -> dict:
    (rec,) = json.loads((out / "tune.json").read_text())["sweeps"]
    return rec


def rung_sets(rec: dict) -> list:
    return [sorted(c["id"] for c in r["candidates"]) for r in rec["rungs"]]


def test_finds_the_optimum_and_never_reruns_a_failed_point(tmp_path, fake):
    f = write(tmp_path, SPACE.format(xs="0, 1, 2, 3, 4, 5, 6, 7"))
    out = tmp_path / "out"
    r = dtune("tune", f, "--out", out, "--no-report", env=fake)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = record(out)
    assert (rec["winner"]["values"]["--x"], rec["winner"]["values"]["--z"]) == (3, 0), rec["winner"]
    assert "flags: --x 3 --z 0" in r.stdout and "export DTUNE_TRAIN_X=3" in r.stdout
    # --x 6 fails and --x 7 runs out of memory: recorded, dropped, each launched once.
    statuses = {(c["values"]["--x"], c["values"]["--z"]): c["status"] for c in rec["rungs"][0]["candidates"]}
    assert statuses[(6, 0)] == statuses[(6, 1)] == "failed" and statuses[(7, 0)] == "oom"
    first = launches(out)
    assert set(first.values()) == {1}, first
    # A second tune over the same directory decides from the recorded runs alone: nothing launches,
    # the failed points are not retried, and the outcome is the same.
    again = dtune("tune", f, "--out", out, "--no-report", env=fake)
    assert again.returncode == 0, again.stdout + again.stderr
    assert launches(out) == first
    assert "failed before: recorded, not retried" in again.stdout
    assert rung_sets(record(out)) == rung_sets(rec)


def test_a_budget_of_runs_is_kept(tmp_path, fake):
    f = write(tmp_path, SPACE.format(xs="0, 1, 2, 3, 4, 5"))
    out = tmp_path / "out"
    r = dtune("tune", f, "--out", out, "--budget", "10", "--seed", "3", "--no-report", env=fake)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = record(out)
    assert sum(launches(out).values()) == rec["spent_runs"] <= 10
    # 12 candidates want rungs of 12, 5 and 2 (each with the incumbent's runs between them, the top
    # rung 3 blocks); 10 runs pay for no halving schedule of three or more candidates, so the first
    # eight of the order --seed 3 shuffles race in one rung of one block: 1 + 7 + 2 incumbent runs.
    assert [(s["candidates"], s["blocks"]) for s in rec["schedule"]] == [(8, 1)]
    assert len(rec["rungs"][0]["candidates"]) == 8 and rec["spent_runs"] == 10


def test_a_share_below_the_smallest_schedule_is_overrun_and_says_by_how_much(tmp_path, fake):
    f = write(tmp_path, SPACE.format(xs="2, 3"))
    out = tmp_path / "out"
    r = dtune("tune", f, "--out", out, "--budget", "2", "--seed", "1", "--no-report", env=fake)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = record(out)
    # Two runs pay for no block: the smallest schedule (two candidates, one block) is the incumbent,
    # the other, the incumbent again. It runs, and the tune says it is over the share, and by what.
    assert rec["spent_runs"] == sum(launches(out).values()) == 3
    assert rec["over_share"] == 1
    assert "left of 2.0) pays for less than the smallest schedule" in rec["short"] and "about 3.0 runs" in rec["short"]
    assert "running it anyway, over the share" in r.stdout


def test_near_ties_are_promoted_together(tmp_path, fake):
    # --y changes nothing: the six --x 3 candidates measure identical samples, the six --x 0 ones
    # are 45% slower. The nominal cut (5 of 12) falls inside the tie: all six go up, no --x 0.
    f = write(
        tmp_path,
        "name: ties\nbinary: dtune-train\nargs: [--warmup-steps, 1, --sleep-ms, 1, --z, 0]\nsteps: 16\n"
        "axes: {--x: [0, 3], --y: [a, b, c, d, e, f]}\n",
    )
    out = tmp_path / "out"
    r = dtune("tune", f, "--out", out, "--no-report", env=fake)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = record(out)
    assert [s["candidates"] for s in rec["schedule"]] == [12, 5, 2]
    first = rec["rungs"][0]["candidates"]
    assert sorted(c["values"]["--y"] for c in first if c["promoted"]) == list("abcdef")
    assert all(c["values"]["--x"] == 3 for c in first if c["promoted"])
    for rung in rec["rungs"][1:]:  # as many ties as twice the rung's size go up
        assert {c["values"]["--x"] for c in rung["candidates"]} == {3}
    assert len(rec["rungs"][2]["candidates"]) == 4
    assert not rec["margin"]["significant"] and rec["margin"]["p"] == 1.0 and rec["margin"]["ratio"] == 1.0
    assert len(rec["tied"]) == 3 and "not significant" in r.stdout and "Tied with it: " in r.stdout


def test_kill_minus_9_then_resume_repeats_no_finished_run(tmp_path, fake):
    f = write(tmp_path, SPACE.format(xs="0, 1, 2, 3, 4, 5"))
    ref = tmp_path / "ref"
    assert dtune("tune", f, "--out", ref, "--no-report", env=fake).returncode == 0
    out = tmp_path / "out"
    p = subprocess.Popen(
        DTUNE + ["tune", str(f), "--out", str(out), "--no-report"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=fake,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while sum(launches(out).values()) < 14:  # into the second rung (12 + 5 + 2 runs in all)
        assert p.poll() is None and time.monotonic() < deadline, "the tune ended before the kill"
        time.sleep(0.02)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    before = launches(out)
    r = dtune("tune", f, "--out", out, "--no-report", env=fake)
    assert r.returncode == 0, r.stdout + r.stderr
    after = launches(out)
    # At most the run the kill interrupted starts again; every other finished run is kept.
    assert sum(after.values()) - sum(before.values()) <= sum(launches(ref).values()) - sum(before.values()) + 1
    assert sum(v - 1 for v in after.values()) <= 1, after
    records = [json.loads(x) for x in (out / "state.jsonl").read_text().splitlines() if x.strip()]
    finished = Counter(x["id"] for x in records if x["event"] == "finished" and x["status"] in ("ok", "oom"))
    assert set(finished.values()) == {1}
    assert rung_sets(record(out)) == rung_sets(record(ref))
    assert record(out)["winner"]["id"] == record(ref)["winner"]["id"]


def test_ties_beyond_what_the_budget_pays_for_are_cut_to_it(tmp_path, fake):
    # The six --x 3 candidates tie exactly; 19 runs pay for the schedule 12 + 5 + 2 and no more, so
    # after the first rung the budget can pay for 5 of the six ties, then 2: it is kept (cap).
    f = write(
        tmp_path,
        "name: ties\nbinary: dtune-train\nargs: [--warmup-steps, 1, --sleep-ms, 1, --z, 0]\nsteps: 16\n"
        "axes: {--x: [0, 3], --y: [a, b, c, d, e, f]}\n",
    )
    out = tmp_path / "out"
    r = dtune("tune", f, "--out", out, "--budget", "26", "--no-report", env=fake)  # 12 + 5 + 2 want 28
    assert r.returncode == 0, r.stdout + r.stderr
    rec = record(out)
    # 12 x 4 steps: 1 + 11 + 3 incumbent runs; 5 x 8 steps: 1 + 4 + 1; 2 x 16 steps: 5 (2 blocks,
    # what the budget pays for).
    assert [(s["candidates"], s["blocks"]) for s in rec["schedule"]] == [(12, 1), (5, 1), (2, 2)]
    assert sum(launches(out).values()) == rec["spent_runs"] == 26
    # Only ties of the optimum go up: 5 of the six, what the budget pays for; the sixth is cut.
    assert {c["values"]["--x"] for c in rec["rungs"][0]["candidates"] if c["promoted"]} == {3}
    cut = [c for c in rec["rungs"][0]["candidates"] if "cut: the budget pays for no more" in c["why"]]
    assert len(cut) == 1 and cut[0]["values"]["--x"] == 3 and not cut[0]["promoted"]


@pytest.mark.parametrize(
    "args,expect",
    [
        (["--objective", "flops"], "--objective flops: not one of samples_per_s"),
        (["--objective", "busbw"], "--objective busbw is measured by dtune-comm"),
        (["--budget", "1"], "cannot run one rung"),
        (["--budget", "1s"], "cannot run one rung"),
        (["--budget", "soon"], "give run time (60s, 10m, 1h) or a number of runs"),
        (["--sweep", "nope"], "--sweep nope: no such sweep"),
        # numpy's seeds are 0 .. 2**32 - 1: until 2026-12 a traceback after the first rung
        (["--seed", "-1"], "--seed -1: give an integer from 0 to 4294967295"),
        (["--seed", "4294967296"], "--seed 4294967296: give an integer from 0 to 4294967295"),
    ],
)
def test_bad_input_exits_2_before_anything_runs(tmp_path, fake, args, expect):
    f = write(tmp_path, SPACE.format(xs="0, 1"))
    r = dtune("tune", f, "--out", tmp_path / "out", *args, env=fake)
    assert r.returncode == 2, r.stdout + r.stderr
    assert expect in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "out" / "launches.log").exists()


def test_optuna_is_no_method_and_the_help_says_why(tmp_path, fake):
    # Optuna was removed in 2026-12 (doc/tuning.md): asking for it is argparse's usage error.
    f = write(tmp_path, SPACE.format(xs="0, 1"))
    r = dtune("tune", f, "--out", tmp_path / "out", "--method", "optuna", env=fake)
    assert r.returncode == 2 and "argument --method: invalid choice: 'optuna'" in r.stderr, r.stderr
    assert not (tmp_path / "out" / "launches.log").exists()
    h = dtune("tune", "--help", env=fake)
    said = " ".join(h.stdout.split())  # argparse wraps the help to the terminal's width
    assert h.returncode == 0 and "optuna was removed" in said and "There is no optuna method" in said


def test_constraints_that_exclude_everything_exit_2(tmp_path, fake):
    f = write(tmp_path, SPACE.format(xs="0, 1") + "constraints: ['--x > 5']\n")
    r = dtune("tune", f, "--out", tmp_path / "out", env=fake)
    assert r.returncode == 2 and "constraints: no points left after the exclusions and constraints" in r.stderr
    g = write(tmp_path, SPACE.format(xs="0, 1, 2, 3") + "constraints: ['--x * --z <= 1']\n", "g.yaml")
    plan = dtune("sweep", "plan", g, env=fake)
    assert plan.returncode == 0 and plan.stdout.startswith("# ") and "6 points" in plan.stdout, plan.stdout


DRIFT = """
name: drift
binary: dtune-train
args: [--warmup-steps, 1, --sleep-ms, 1, --drift, {seed}, --slow-period-ms, 60]
steps: 16
axes: {{--x: [1, 3, 4], --z: [0, 1]}}
"""


@pytest.mark.parametrize("seed", [1, 2, 5])
def test_slow_periods_never_make_a_wrong_winner_significant(tmp_path, fake, seed):
    # The fake's machine drifts (seeded slow periods of x1.3-1.8 on the launch clock, 5-20% step
    # noise): under these seeds the tune of one run per candidate named a configuration 5% or 20%
    # slower than the optimum (--x 3 --z 0) the winner, "significant". Paired rungs never do, and
    # a pick other than the optimum names it tied, or its margin's interval over the runner-up
    # holds their true ratio (seed 2: --x 4 --z 0 over --x 3 --z 1, truly 1.10 / 1.05 = 1.048,
    # measured [1.003, 1.162], the optimum left in the rung before).
    def step(v):
        return (1 + 0.05 * (v["--x"] - 3) ** 2) * (1 + 0.1 * (v["--z"] == 1))

    f = write(tmp_path, DRIFT.format(seed=seed))
    out = tmp_path / "out"
    r = dtune("tune", f, "--out", out, "--no-report", env=fake)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = record(out)
    w = rec["winner"]["values"]
    if (w["--x"], w["--z"]) != (3, 0):
        m = rec["margin"]
        assert not m["significant"], m
        tied = {(t["label"]) for t in rec["tied"]}
        (second,) = {
            c["candidate_id"]: c["values"]
            for r in rec["rungs"]
            for c in r["candidates"]
            if c["candidate_id"] == m["id"]
        }.values()
        assert "--x 3 --z 0" in tied or m["lo"] <= step(second) / step(w) <= m["hi"], (rec["tied"], m)


def test_the_top_rung_races_the_blocks_the_budget_adds(tmp_path, fake):
    # A budget of runs beyond the top rung's 3 blocks buys more blocks, each for the candidates that
    # can still be the best: --x 0 (45% slower) leaves the race after its 3 blocks with P(best) 0,
    # and the near-tied --x 2, 3, 4 (5% apart) run every block (the drift is seeded on the launch
    # clock, so a budget of runs makes the tune deterministic). Seed 7: seed 2, until the level was
    # read from every run (levels.py), now finds --x 3 dominant after the 3 blocks, with no race.
    f = write(tmp_path, DRIFT.format(seed=7).replace("--x: [1, 3, 4], --z: [0, 1]", "--x: [0, 2, 3, 4], --z: [0]"))
    out = tmp_path / "out"
    r = dtune("tune", f, "--out", out, "--budget", "60", "--seed", "7", "--no-report", env=fake)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = record(out)
    top = rec["rungs"][-1]
    assert top["blocks"] > 3 and sum(launches(out).values()) == rec["spent_runs"] <= 60
    by_x = {c["values"]["--x"]: c for c in top["candidates"]}
    assert top["raced_out"] == [by_x[0]["candidate_id"]], top["raced_out"]
    assert by_x[0]["runs"] == 3 and by_x[0]["p_best"] < 0.05 / 4
    for x in (2, 3, 4):
        assert by_x[x]["runs"] >= top["blocks"], (x, by_x[x]["runs"])


def test_rungs_run_in_the_recorded_interleaved_order_and_repeats_are_blocks(tmp_path, fake):
    f = write(tmp_path, DRIFT.format(seed=4) + "repeats: 2\n")
    out = tmp_path / "out"
    r = dtune("tune", f, "--out", out, "--no-report", env=fake)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = record(out)
    assert rec["repeats"] == 2 and [s["blocks"] for s in rec["schedule"]] == [2, 2, 3]
    assert [rung["blocks"] for rung in rec["rungs"]] == [2, 2, 3][: len(rec["rungs"])]
    launched = [json.loads(x) for x in (out / "launches.log").read_text().splitlines()]
    ids = [Path(a[a.index("--output") + 1]).stem for a in launched]
    assert ids == [i for rung in rec["rungs"] for i in rung["order"]]  # the order ran is the one recorded
    for rung in rec["rungs"]:
        inc = {c["id"] for c in rung["candidates"] if c["incumbent"]}
        runs_of_inc = [i for i in rung["order"] if _same_candidate(out, i, rung)]
        assert rung["order"][0] in runs_of_inc and rung["order"][-1] in runs_of_inc, inc
        gaps, n = [], 0
        for i in rung["order"][1:]:
            if i in runs_of_inc:
                gaps.append(n)
                n = 0
            else:
                n += 1
        assert max(gaps) <= 4  # at most 4 candidates between two incumbent runs
        per_block = [i for i in rung["order"] if i not in runs_of_inc]
        assert len(per_block) == rung["blocks"] * (len(rung["candidates"]) - 1)
    assert rec["noise_floor"]["incumbent_repeats"] >= 2 and "Noise floor of one block: " in r.stdout


def _same_candidate(out: Path, run_id: str, rung: dict) -> bool:
    """Whether run `run_id` (a point in the manifest) is a run of the rung's incumbent."""
    manifest = {m["id"]: m for m in json.loads((out / "manifest.json").read_text())}
    inc = next(c for c in rung["candidates"] if c["incumbent"])
    return manifest[run_id]["values"] == {**inc["values"], "steps": rung["steps"]}


@pytest.mark.parametrize("bad", ["two", "0"])
def test_a_malformed_repeats_exits_2_with_one_line(tmp_path, fake, bad):
    f = write(tmp_path, SPACE.format(xs="0, 1") + f"repeats: {bad}\n")
    r = dtune("tune", f, "--out", tmp_path / "out", env=fake)
    assert r.returncode == 2 and "repeats" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "out" / "launches.log").exists()


BAD_FIGURES = """
name: bad
binary: dtune-train
args: [--warmup-steps, 1, --sleep-ms, 1, --nan-at, 3, --zero-ms-at, 4]
steps: 8
axes: {{--x: [{xs}]}}
"""


def by_x(rec: dict) -> dict:
    """{--x: (status, reason)} of every candidate the rungs record (the last record of each)."""
    return {c["values"]["--x"]: (c["status"], c.get("reason", "")) for r in rec["rungs"] for c in r["candidates"]}


def test_figures_that_are_not_finite_are_failed_measurements_never_a_pick(tmp_path, fake):
    # --x 3 records NaN step times, --x 4 steps of 0 ms (an infinite samples/s). Until 2026-12
    # halving picked whichever opened the rung (exit 0 with an export block), reading every other
    # run against its figures.
    f = write(tmp_path, BAD_FIGURES.format(xs="3, 4"))
    out = tmp_path / "out"
    r = dtune("tune", f, "--out", out, "--no-report", env=fake)
    assert r.returncode == 1, r.stdout + r.stderr
    assert record(out)["winner"] is None and "export" not in r.stdout
    assert "no candidate measured" in r.stdout
    # Each run says why it is no measurement, in the output and in the record.
    why = {3: "8 NaN of its 8 step figures: not a measurement", 4: "8 infinite of its 8 step figures"}
    why[4] += ": not a measurement"
    got = by_x(record(out))
    for x in [3, 4]:
        assert f"invalid: {why[x]}" in r.stdout, r.stdout
        assert got[x] == ("invalid", why[x]), got


def test_a_candidate_with_figures_that_are_not_finite_is_recorded_failed_and_the_finite_one_wins(tmp_path, fake):
    # --seed 1 opens halving's rung with --x 3 (NaN), then --x 4 (0 ms steps): both are dropped with
    # their reason, and --x 2, the only candidate that measured, is the pick.
    f = write(tmp_path, BAD_FIGURES.format(xs="2, 3, 4"))
    out = tmp_path / "out"
    r = dtune("tune", f, "--out", out, "--seed", "1", "--no-report", env=fake)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = record(out)
    assert rec["winner"]["values"]["--x"] == 2, rec["winner"]
    got = by_x(rec)
    assert got[3][0] == "invalid" and got[3][1].endswith(" NaN of its 4 step figures: not a measurement"), got
    assert got[4][0] == "invalid" and got[4][1].endswith(" infinite of its 4 step figures: not a measurement"), got
    assert got[2][0] == "ok"


HANGS = """
name: hangs
binary: dtune-train
args: [--warmup-steps, 1, --sleep-ms, 1, --hang-at, 5]
steps: 8
repeats: 3
axes: {--x: [2, 3, BAD]}
"""


@pytest.mark.parametrize("bad,status", [(6, "failed"), (5, "timeout")])
def test_a_candidate_that_fails_or_hangs_is_launched_once_per_rung(tmp_path, fake, bad, status):
    # Three blocks per rung (repeats: 3); --seed 0 opens the rung with --x 2, so --x 6 (fails) or
    # --x 5 (hangs until --timeout) is a candidate of the first block. Until 2026-12 it was launched
    # again in every block of the rung: 3 x --timeout of a hanging one.
    f = write(tmp_path, HANGS.replace("BAD", str(bad)))
    out = tmp_path / "out"
    r = dtune("tune", f, "--out", out, "--seed", "0", "--timeout", "8", "--no-report", env=fake)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = record(out)
    ran = Counter(int(a[a.index("--x") + 1]) for a in map(json.loads, launches(out).elements()))
    assert ran[bad] == 1, ran
    assert sum(ran.values()) == rec["spent_runs"]  # the budget counts the runs made, and no other
    (c,) = [c for c in rec["rungs"][0]["candidates"] if c["values"]["--x"] == bad]
    assert c["status"] == status and not c["promoted"] and c["runs"] == 1, c
    assert rec["rungs"][0]["blocks"] == 3 and rec["winner"]["values"]["--x"] == 3


def test_a_failed_candidate_stays_out_of_its_rung_after_kill_minus_9(tmp_path, fake):
    f = write(tmp_path, HANGS.replace("BAD", "6"))
    out = tmp_path / "out"
    p = subprocess.Popen(
        DTUNE + ["tune", str(f), "--out", str(out), "--seed", "0", "--no-report"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=fake,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while sum(launches(out).values()) < 5:  # the first block (opening run, 3 runs) and a run after it
        assert p.poll() is None and time.monotonic() < deadline, "the tune ended before the kill"
        time.sleep(0.02)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    r = dtune("tune", f, "--out", out, "--seed", "0", "--no-report", env=fake)
    assert r.returncode == 0, r.stdout + r.stderr
    ran = Counter(int(a[a.index("--x") + 1]) for a in map(json.loads, launches(out).elements()))
    assert ran[6] == 1, ran


def test_an_incumbent_whose_run_fails_within_its_rung_hands_the_rung_on(tmp_path, fake):
    # --x 2 opens the rung (--seed 0) and measures, then fails from its second run on (the block's
    # incumbent run). Until 2026-12 it was launched in every block all the same and stayed the
    # incumbent; now the rung is not run on after it: it is recorded failed, the next candidate
    # opens the rung (reusing the runs made), and --x 2 is launched no more.
    f = write(tmp_path, HANGS.replace("--hang-at, 5", "--flaky-at, 2").replace("BAD", "4"))
    out = tmp_path / "out"
    r = dtune("tune", f, "--out", out, "--seed", "0", "--no-report", env=fake)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = record(out)
    ran = Counter(int(a[a.index("--x") + 1]) for a in map(json.loads, launches(out).elements()))
    assert ran[2] == 2 and sum(ran.values()) == rec["spent_runs"], ran
    (c,) = [c for c in rec["rungs"][0]["candidates"] if c["values"]["--x"] == 2]
    assert c["status"] == "failed" and not c["promoted"], c
    assert rec["winner"]["values"]["--x"] == 3


def test_the_recommended_export_block_names_each_flag_s_fallback_as_dtune_train_reads_it(tmp_path):
    # --pp is --pipeline-stages, whose fallback is DTUNE_TRAIN_PIPELINE_STAGES (no DTUNE_TRAIN_PP);
    # --mesh-order and --tp have their own (issue 56).
    import sys

    sys.path[:0] = [str(REPO / "sweeps")]
    from dtune_sweep.candidates import recommendation
    from dtune_sweep.spec import Point

    values = {"--pp": 2, "--mesh-order": "tp,dp,pp", "--tp": 1}
    p = Point("s", "dtune-train", ["--pp", "2", "--mesh-order", "tp,dp,pp", "--tp", "1"], {}, 4, 1, 0, 0, values)
    assert recommendation(p, tmp_path, [])["export"] == [
        "export DTUNE_TRAIN_PIPELINE_STAGES=2",
        "export DTUNE_TRAIN_MESH_ORDER=tp,dp,pp",
        "export DTUNE_TRAIN_TP=1",
    ]
