"""The scaling model (report/dtune_report/scaling_model.py) on a profile small enough to work out by
hand, exactly; the ring fit recovers the constants it was made from; the projection names a best
bucket size and where scaling breaks. No binaries: pure arithmetic on fixed inputs."""

from datetime import datetime, timedelta, timezone
from pathlib import Path

import h5py
import numpy as np
import pytest
from train_fixture import train_file

from dtune_report.clusters import CLUSTERS
from dtune_report.model_check import CheckRow, format_scaling, scaling_pairs
from dtune_report.model_inputs import (
    ProfileRun,
    fit_ring,
    nearest_profile,
    parse_time,
    pooled_profile,
    ranks_per_machine,
    run_midpoint,
)
from dtune_report.model_pieces import Pieces, block_units, model_pieces
from dtune_report.projection import project
from dtune_report.scaling_model import (
    MIB,
    LinkFit,
    Profile,
    Shape,
    bucket_cost_s,
    comm_slowdown_factor,
    compute_factor,
    monotone,
    plan_buckets,
    predict,
    ranks_sharing_machine,
    replay,
    replay_step,
)
from dtune_report.sharding import (
    SHARD_MODES,
    Shard,
    describe_memory,
    gathered_peak,
    gathered_phase,
    predict_sharded,
    state_memory,
    units_from_bytes,
    units_of,
)

# Four parameters in model order, 2, 1, 1 and 1 MiB. Backward produces them last first.
PARAM_BYTES = np.array([2, 1, 1, 1]) * MIB
# Two steps. Step 0: backward 10 ms, the whole step 30 ms, gradients of p3, p2, p1, p0 ready at
# 1, 2, 6 and 9 ms. Step 1: backward 10 ms, step 40 ms, ready at 0.5, 0.5, 1 and 2 ms.
READY = np.array([[9.0, 6.0, 2.0, 1.0], [2.0, 1.0, 0.5, 0.5]])
# Links: within a node α = 0.5 ms per ring step, β = 1 ms per MiB; between nodes α = 1 ms, β = 4 ms/MiB.
INTRA = LinkFit(0.5e-3, 1e-3 / MIB)
INTER = LinkFit(1e-3, 4e-3 / MIB)


def profile():
    return Profile(
        total_ms=np.array([30.0, 40.0]),
        backward_ms=np.array([10.0, 10.0]),
        ready_ms=READY,
        param_bytes=PARAM_BYTES,
        first_bucket_mb=1.0,
    )


def test_buckets_are_planned_as_the_trainer_plans_them():
    # Reverse order p3, p2, p1, p0. Bucket 0 (cap 1 MiB): p3 (1 MiB); p2 would make 2 > 1, so a new
    # bucket 1 (cap 2 MiB): p2, then p1 (2 MiB, not above the cap); p0 would make 4 > 2: bucket 2.
    assert plan_buckets(PARAM_BYTES, 1 * MIB, 2 * MIB) == [[3], [2, 1], [0]]
    # A parameter larger than the cap gets a bucket of its own; the first bucket takes one
    # parameter even when it is larger than its cap.
    assert plan_buckets(np.array([5, 1, 1]), 1, 2) == [[2], [1], [0]]
    assert plan_buckets(np.array([1, 1, 1]), 1, 100) == [[2], [1, 0]]


def test_one_node_two_ranks_by_hand():
    # p = 2: T(n) = 2(p-1)α + 2(p-1)/p·n·β = 1 ms + n[MiB] ms. Buckets 1, 2, 2 MiB: 2, 3, 3 ms.
    # Step 0: bucket ready times max(p3) = 1, max(p2, p1) = 6, max(p0) = 9.
    #   b0 runs 1 -> 3; b1 starts at max(6, 3) = 6 -> 9; b2 at max(9, 9) = 9 -> 12.
    #   Exposed 12 - 10 = 2 ms; step 30 + 2 = 32 ms.
    # Step 1: ready 0.5, 1, 2. b0 0.5 -> 2.5; b1 max(1, 2.5) -> 5.5; b2 max(2, 5.5) -> 8.5 < 10.
    #   Exposed 0; step 40.
    # Medians of two: step (32 + 40) / 2 = 36, exposed (2 + 0) / 2 = 1; base (30 + 40) / 2 = 35.
    p = predict(profile(), Shape(1, 2), 2.0, {"intra": INTRA})
    assert p.buckets == 3
    assert p.comm_ms == pytest.approx(8.0, abs=1e-12)
    assert p.step_ms == pytest.approx(36.0, abs=1e-12)
    assert p.exposed_ms == pytest.approx(1.0, abs=1e-12)
    assert p.efficiency == pytest.approx(35.0 / 36.0, abs=1e-12)


def test_overlap_off_launches_everything_when_backward_ends():
    # Every bucket ready at 10 ms: 10 -> 12 -> 15 -> 18 in both steps; exposed 8; steps 38 and 48.
    p = predict(profile(), Shape(1, 2), 2.0, {"intra": INTRA}, overlap=False)
    assert p.exposed_ms == pytest.approx(8.0, abs=1e-12)
    assert p.step_ms == pytest.approx(43.0, abs=1e-12)


def test_two_nodes_hierarchical_and_flat_by_hand():
    fits = {"intra": INTRA, "inter": INTER}
    # Hierarchical 2 x 2: within the node (p = 2) 1 + n ms, among the 2 leaders 2·1 + n·4 ms.
    # Buckets 1, 2, 2 MiB: 2 + 6 = 8, 3 + 10 = 13, 13 ms.
    # Step 0: b0 1 -> 9; b1 max(6, 9) -> 22; b2 max(9, 22) -> 35: exposed 25, step 55.
    # Step 1: b0 0.5 -> 8.5; b1 -> 21.5; b2 -> 34.5: exposed 24.5, step 64.5.
    h = predict(profile(), Shape(2, 2, "hierarchical"), 2.0, fits)
    assert h.exposed_ms == pytest.approx(24.75, abs=1e-12)
    assert h.step_ms == pytest.approx(59.75, abs=1e-12)
    # Flat 2 x 2: one ring of 4 on the inter-node constants: 2·3·1 + 2·3/4·n·4 = 6 + 6n ms:
    # 12, 18, 18. Step 0: 1 -> 13 -> 31 -> 49: exposed 39. Step 1: 0.5 -> 12.5 -> 30.5 -> 48.5:
    # exposed 38.5. Medians: exposed 38.75, step (69 + 78.5) / 2 = 73.75.
    f = predict(profile(), Shape(2, 2, "flat"), 2.0, fits)
    assert f.exposed_ms == pytest.approx(38.75, abs=1e-12)
    assert f.step_ms == pytest.approx(73.75, abs=1e-12)


def test_one_rank_has_no_communication():
    p = predict(profile(), Shape(1, 1), 25.0, {})
    assert (p.exposed_ms, p.comm_ms, p.step_ms, p.efficiency) == (0.0, 0.0, 35.0, 1.0)


def test_the_ring_fit_recovers_its_constants():
    # Times made by the ring model at p = 2 and 4 over sizes 1 KiB .. 16 MiB: the fit returns α and
    # β to rounding (on the line every weighting agrees; the weights are tested below).
    alpha, beta = 7e-6, 1 / 3e9
    p = np.repeat([2.0, 4.0], 8)
    size = np.tile(1024.0 * 4.0 ** np.arange(8), 2)
    t = 2 * (p - 1) * alpha + 2 * (p - 1) / p * size * beta
    fit = fit_ring(p, size, t, "test")
    assert fit.alpha_s == pytest.approx(alpha, rel=1e-9)
    assert fit.beta_s_per_byte == pytest.approx(beta, rel=1e-9)


def test_the_ring_fit_minimises_the_relative_error():
    # The same times with the largest size 10% slow at both rank counts. Weighted 1/t² (doc/metrics.md
    # section 2), small sizes set α: it stays within 1%; unweighted, the two largest sizes would set
    # both and take 85% off α. No nearby (α, β) has a smaller sum of squared relative errors.
    alpha, beta = 7e-6, 1 / 3e9
    p = np.repeat([2.0, 4.0], 8)
    size = np.tile(1024.0 * 4.0 ** np.arange(8), 2)
    t = (2 * (p - 1) * alpha + 2 * (p - 1) / p * size * beta) * np.where(size == size.max(), 1.1, 1.0)
    fit = fit_ring(p, size, t, "test")
    assert fit.alpha_s == pytest.approx(alpha, rel=0.01)

    def relative_sse(a, b):
        return float(np.sum(((t - 2 * (p - 1) * a - 2 * (p - 1) / p * size * b) / t) ** 2))

    best = relative_sse(fit.alpha_s, fit.beta_s_per_byte)
    for da, db in ((1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (-1, -1), (1, -1), (-1, 1)):
        assert best < relative_sse(fit.alpha_s * (1 + 1e-3 * da), fit.beta_s_per_byte * (1 + 1e-3 * db))


def test_a_measured_link_is_read_for_its_rank_count_by_hand():
    # Measured at 2 ranks: 10 ms at 1 MiB, 40 ms at 4 MiB; the α–β line α = 1 ms, β = 2 ms/MiB.
    f = LinkFit(1e-3, 2e-3 / MIB, "test", sizes=(1 * MIB, 4 * MIB), times_s=(10e-3, 40e-3), table_ranks=2)
    assert f.ring_s(2 * MIB, 2) == pytest.approx(20e-3)  # linear between the two sizes
    assert f.ring_s(0.5 * MIB, 2) == pytest.approx(10e-3)  # below: the smallest size's time
    assert f.ring_s(6 * MIB, 2) == pytest.approx(44e-3)  # above: 40 ms + 2 MiB x 2(2-1)/2 x 2 ms/MiB
    # Another rank count: the ring model, 2(4-1) x 1 ms + 2(4-1)/4 x 1 MiB x 2 ms/MiB = 9 ms.
    assert f.ring_s(1 * MIB, 4) == pytest.approx(9e-3)
    assert f.ring_s(1 * MIB, 1) == 0.0


def test_measured_times_are_made_non_decreasing_by_pooling_neighbours():
    assert monotone([1.0, 3.0, 2.0, 4.0]).tolist() == [1.0, 2.5, 2.5, 4.0]
    assert monotone([5.0, 1.0, 0.0]).tolist() == pytest.approx([2.0, 2.0, 2.0])
    assert monotone([1.0, 2.0]).tolist() == [1.0, 2.0]


def test_projection_names_a_best_bucket_and_where_scaling_breaks():
    # The hand-computed profile on 8-GPU nodes: compute fixed (scale 1), so as nodes grow the ring
    # latency 2(N-1)α_inter of each bucket grows until communication dominates.
    pr = project(profile(), CLUSTERS["h100-ib400"], nodes=[1, 2, 1024], buckets_mb=[1, 2, 5], scale=1.0)
    assert pr.efficiency.shape == (3, 3)
    assert pr.efficiency[0].max() > 0.99  # 5 MiB over NVLink at 370 GB/s hides behind 10 ms
    # At 1,024 nodes each bucket costs 2·1023·6 µs ≈ 12 ms of latency: the fewest buckets win, 5 MiB
    # (two buckets: the first is capped at 1 MiB) against three at 2 MiB and four at 1 MiB.
    assert pr.buckets_mb[pr.best(2)] == 5
    assert pr.breaks_at() == 1024


def test_compute_factor_by_hand():
    # R ranks x T threads on C cores: max(1, R·T/C) over the profile's max(1, T_p/C).
    assert compute_factor(2, 1, 2) == 1.0  # 2 threads, 2 cores
    assert compute_factor(2, 1, 4) == 2.0  # 4 threads, 2 cores: half a core each
    assert compute_factor(8, 2, 8) == 2.0  # 16 threads, 8 cores
    assert compute_factor(2, 2, 2) == 2.0  # 4 threads on 2 cores, the profile's 2 had a core each
    assert compute_factor(1, 2, 2) == 2.0  # the profile (1 rank x 2 threads) shared 1 core already: 4 / 2
    assert compute_factor(0, 1, 4) == 1.0  # cores unknown: no contention assumed


def test_reductions_during_backward_cost_from_the_busy_fits_by_hand():
    # Beside busy threads α = 2 ms, β = 1 ms/MiB: p = 2 gives 4 + n[MiB] ms, buckets 1, 2, 2 MiB
    # cost 5, 6, 6 ms while backward computes; on idle cores (INTRA) 2, 3, 3 ms. A reduction
    # advances 1/busy of itself per ms during backward and 1/idle after it.
    # Step 0 (backward 10, ready 1, 6, 9): b0 1 -> 6 (busy); b1 starts at 6, by 10 it has done 4/6,
    #   the last 2/6 of its idle 3 ms take 1: ends 11; b2 at 11 >= 10, idle, ends 14. Exposed 4, step 34.
    # Step 1 (ready 0.5, 1, 2): b0 0.5 -> 5.5; b1 5.5, by 10 4.5/6 done, the rest 1.5/6 x 3 = 0.75:
    #   ends 10.75; b2 idle -> 13.75. Exposed 3.75, step 43.75. Medians: exposed 3.875, step 38.875.
    busy = LinkFit(2e-3, 1e-3 / MIB)
    p = predict(profile(), Shape(1, 2), 2.0, {"intra": INTRA}, busy_fits={"intra": busy})
    assert p.exposed_ms == pytest.approx(3.875, abs=1e-12)
    assert p.step_ms == pytest.approx(38.875, abs=1e-12)
    assert p.comm_ms == pytest.approx(8.0, abs=1e-12)  # the idle-core costs, as before


def test_compute_scale_stretches_every_compute_time_by_hand():
    # x2: steps 60 and 80, backward 20, ready times doubled; idle costs 2, 3, 3 ms.
    # Step 0 (ready 2, 12, 18): 2 -> 4, 12 -> 15, 18 -> 21: exposed 1, step 61.
    # Step 1 (ready 1, 2, 4): 1 -> 3, 3 -> 6, 6 -> 9 < 20: exposed 0, step 80.
    # Medians: exposed 0.5, step 70.5; efficiency against the unscaled 1-rank step, 35 / 70.5.
    p = predict(profile(), Shape(1, 2), 2.0, {"intra": INTRA}, compute_scale=2.0)
    assert p.exposed_ms == pytest.approx(0.5, abs=1e-12)
    assert p.step_ms == pytest.approx(70.5, abs=1e-12)
    assert p.efficiency == pytest.approx(35.0 / 70.5, abs=1e-12)
    assert p.compute_factor == 2.0


def test_ranks_sharing_a_machine_count_by_boot_id_and_fall_back_to_hosts():
    hosts = ["n0", "n0", "n1", "n1"]  # 2 nodes x 2 ranks
    # Simulated nodes on one kernel (one boot id): 4 ranks on the machine's cores.
    assert ranks_per_machine(hosts, ["b"] * 4, 4) == (4, "machine")
    assert ranks_per_machine(hosts, ["a", "a", "b", "b"], 4) == (2, "machine")  # two real machines
    assert ranks_per_machine(["n0", "n1", "n0", "n1"], ["a", "b", "a", "b"], 4) == (2, "machine")
    # Older files (no rank_boot_id) and a rank that could not read its own: per node, as before.
    assert ranks_per_machine(hosts, [], 4) == (2, "node")
    assert ranks_per_machine(hosts, ["b", "b", "", "b"], 4) == (2, "node")
    assert ranks_per_machine([], [], 4) == (4, "node")  # nothing recorded: one node
    # 1 thread per rank on 2 cores: 2 simulated nodes x 2 ranks are stretched x2; counted per node, x1.
    assert compute_factor(2, 1, ranks_per_machine(hosts, ["b"] * 4, 4)[0]) == 2.0
    assert compute_factor(2, 1, ranks_per_machine(hosts, [], 4)[0]) == 1.0


def _profile_run(name: str, step_ms: float, minute: int | None) -> ProfileRun:
    p = profile()
    p = Profile(p.total_ms * 0 + step_ms, p.backward_ms, p.ready_ms, p.param_bytes)
    when = None if minute is None else datetime(2026, 12, 1, 12, minute, tzinfo=timezone.utc)
    return ProfileRun(f"{name}.h5", "0000-train", {}, {}, p, 2, when)


def test_the_nearest_profile_in_time_and_the_pooled_profiles():
    runs = [_profile_run("a", 30, 0), _profile_run("b", 40, 10), _profile_run("c", 50, 20)]
    at = datetime(2026, 12, 1, 12, 14, tzinfo=timezone.utc)
    assert nearest_profile(runs, at).file == "b.h5"  # 4 min away, against 6 and 14
    assert nearest_profile(runs, at + timedelta(minutes=2)).file == "c.h5"
    assert nearest_profile(runs, None).file == "a.h5"  # the run's time unknown: the first
    assert nearest_profile([_profile_run("u", 30, None), runs[2]], at).file == "c.h5"  # untimed skipped
    pooled = pooled_profile(runs)  # every step of the three: 2 each at 30, 40 and 50 ms
    assert sorted(pooled.total_ms) == [30, 30, 40, 40, 50, 50] and pooled.ready_ms.shape == (6, 4)
    assert float(np.median(pooled.total_ms)) == 40.0
    # The midpoint of a run's provenance times; start alone where it has no end.
    mid = run_midpoint({"start_time": "2026-12-01T12:00:00.000Z", "end_time": "2026-12-01T12:01:00.000Z"})
    assert mid == datetime(2026, 12, 1, 12, 0, 30, tzinfo=timezone.utc)
    assert run_midpoint({"start_time": "2026-12-01T12:00:00.000Z"}) == parse_time("2026-12-01T12:00:00Z")
    assert run_midpoint({}) is None and parse_time("not a time") is None


def _row(run: str, shape: Shape, measured_ms: float, bucket: float = 2.0, ident=(("model", "m"),)) -> CheckRow:
    fits = {"intra": INTRA, "inter": INTER}
    pred = predict(profile(), shape, bucket, {lv: fits[lv] for lv in shape.levels()})
    return CheckRow(
        "f.h5", run, "m b1", shape, bucket, measured_ms, 0.0, pred.base_step_ms / measured_ms, pred, pred,
        "p", 2, 1, False, world_size=shape.ranks, identity=ident,
    )  # fmt: skip


def test_shapes_at_equal_global_batch_are_set_side_by_side():
    # 1 node x 4 and 2 nodes x 2 of one configuration pair up (same world size, bucket, settings);
    # another bucket size, world size or configuration has no partner on another shape.
    one, two = _row("a", Shape(1, 4), 50.0), _row("b", Shape(2, 2), 60.0)
    alone = [_row("c", Shape(1, 2), 40.0), _row("d", Shape(2, 2), 60.0, bucket=5.0)]
    alone.append(_row("e", Shape(1, 4), 50.0, ident=(("model", "other"),)))
    (pair,) = scaling_pairs([two, *alone, one])
    assert [c.run for c in pair] == ["a", "b"]  # fewest nodes first
    text = format_scaling([two, *alone, one])
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert len(lines) == 2 and lines[0].split()[4:7] == ["1", "x", "4"]
    assert lines[1].split()[-2] == "1.200"  # measured: 60 / 50
    pred_ratio = two.predicted.step_ms / one.predicted.step_ms
    assert lines[1].split()[-1] == f"{pred_ratio:.3f}"
    assert format_scaling(alone) == ""


def test_polling_communication_threads_slow_backward_by_hand():
    # One bucket ready at 2 ms of a 10 ms backward, costing 4 ms, backward 2x slower while it is in
    # flight: compute reaches 2 at wall 2; the reduction runs 2 -> 6 while compute goes 2 -> 4; the
    # last 6 ms at full speed: backward ends at wall 12, the reduction long done.
    assert replay([2.0], 10.0, [4.0], slowdown=2.0) == (0.0, 6.0, 12.0)
    # Two buckets ready at 2 and 9: b0 2 -> 6 (compute 2 -> 4), compute 4 -> 9 by wall 11, b1 11 -> 15
    # while compute goes 9 -> 10 by wall 13: backward ends at 13, 2 ms exposed. Without the
    # slowdown: b0 2 -> 6, b1 9 -> 13, backward ends at 10, 3 ms exposed (replay_step's answer).
    assert replay([2.0, 9.0], 10.0, [4.0, 4.0], slowdown=2.0) == (2.0, 15.0, 13.0)
    assert replay([2.0, 9.0], 10.0, [4.0, 4.0]) == (3.0, 13.0, 10.0)
    assert replay_step([2.0, 9.0], 10.0, [4.0, 4.0]) == (3.0, 13.0)
    # R ranks x (T + 1) threads while reducing against R x T otherwise, on C cores.
    assert comm_slowdown_factor(2, 1, 2) == 2.0  # 4 threads against 2, on 2 cores
    assert comm_slowdown_factor(2, 1, 4) == 2.0  # 8 against 4
    assert comm_slowdown_factor(8, 1, 2) == 1.0  # 4 threads fit on 8 cores
    assert comm_slowdown_factor(8, 1, 6) == 1.5  # 12 threads against 6 on 8 cores
    assert comm_slowdown_factor(0, 1, 4) == 1.0  # cores unknown (a GPU profile)
    # predict() adds the time backward lost: one rank of Shape(1, 2), slowdown 1, is the old answer.
    base = predict(profile(), Shape(1, 2), 2.0, {"intra": INTRA})
    slowed = predict(profile(), Shape(1, 2), 2.0, {"intra": INTRA}, comm_slowdown=2.0)
    assert slowed.step_ms > base.step_ms


def test_nodes_per_machine_sets_the_ranks_sharing_a_machine_by_hand():
    # K = R·min(M, N): one node per machine (M = 1, a real cluster) against the simulated cluster's
    # nodes all on one machine, which model check counts per boot id.
    assert ranks_sharing_machine(Shape(2, 2)) == ranks_sharing_machine(Shape(2, 2), 1) == 2
    assert ranks_sharing_machine(Shape(2, 2), 2) == 4 == ranks_per_machine(["n0", "n0", "n1", "n1"], ["b"] * 4, 4)[0]
    assert ranks_sharing_machine(Shape(1, 2), 2) == 2  # a shape of fewer nodes: all of them on one machine
    assert ranks_sharing_machine(Shape(3, 2), 2) == 4  # machines of 2 nodes and 1: the fuller one
    with pytest.raises(ValueError, match="positive"):
        ranks_sharing_machine(Shape(2, 2), 0)
    # One 1 MiB parameter ready at 8 ms of a 10 ms backward, a 30 ms step; 2 nodes x 1 rank, flat,
    # a ring of 2 on the inter-node link: 2·1 ms + 2·(1/2)·1 MiB·4 ms/MiB = 6 ms. 1 thread per rank,
    # 1 core per machine.
    prof = Profile(np.array([30.0]), np.array([10.0]), np.array([[8.0]]), np.array([MIB]), first_bucket_mb=1.0)
    shape, fits = Shape(2, 1), {"inter": INTER}
    runs = {}
    for m in (1, 2):
        k = ranks_sharing_machine(shape, m)
        cf, cs = compute_factor(1, 1, k), comm_slowdown_factor(1, 1, k)
        runs[m] = (k, cf, cs, predict(prof, shape, 25.0, fits, compute_scale=cf, comm_slowdown=cs))
    # M = 1: K = 1, cf = max(1, 1/1) = 1, polling slows backward max(1, 2/1) / max(1, 1/1) = 2x.
    # The reduction runs 8 -> 14; the last 2 ms of compute take 4: backward ends at 12, 2 ms late,
    # and 2 ms are exposed: step 30 + 2 + 2 = 34.
    k, cf, cs, p = runs[1]
    assert (k, cf, cs) == (1, 1.0, 2.0)
    assert p.step_ms == pytest.approx(34.0, abs=1e-12) and p.exposed_ms == pytest.approx(2.0, abs=1e-12)
    # M = 2: both nodes on one core: K = 2, cf = max(1, 2/1) = 2, slowdown max(1, 4) / max(1, 2) = 2.
    # Step 60, backward 20, ready at 16: the reduction runs 16 -> 22, compute meanwhile at half
    # speed 16 -> 19, its last 1 ms at full speed: backward ends at 23, 3 ms late, nothing exposed:
    # step 60 + 3 = 63, efficiency 30 / 63.
    k, cf, cs, p = runs[2]
    assert (k, cf, cs) == (2, 2.0, 2.0)
    assert p.step_ms == pytest.approx(63.0, abs=1e-12) and p.exposed_ms == pytest.approx(0.0, abs=1e-12)
    assert p.efficiency == pytest.approx(30.0 / 63.0, abs=1e-12)


# Sharded data parallelism (sharding.py, `dtune model --shard`): the same profile with a 5 ms forward.
def fwd_profile():
    p = profile()
    p.forward_ms = np.array([5.0, 5.0])
    return p


def test_reduce_scatter_and_all_gather_are_half_an_allreduce():
    # Ring over p = 4 (α = 0.5 ms, β = 1 ms/MiB), n = 2 MiB: RS = AG = (p-1)α + (p-1)/p·n·β = 1.5 + 1.5.
    n = 2 * MIB
    assert bucket_cost_s(n, Shape(1, 4), {"intra": INTRA}, "reduce_scatter") == pytest.approx(3e-3, abs=1e-15)
    assert bucket_cost_s(n, Shape(1, 4), {"intra": INTRA}, "all_gather") == pytest.approx(3e-3, abs=1e-15)
    # Hierarchical 2 x 2: each level's half, (1 x 0.5 + 1/2 x 2 x 1) + (1 x 1 + 1/2 x 2 x 4) = 1.5 + 5 ms.
    fits = {"intra": INTRA, "inter": INTER}
    assert bucket_cost_s(n, Shape(2, 2, "hierarchical"), fits, "all_gather") == pytest.approx(6.5e-3, abs=1e-15)
    # RS + AG of n is one allreduce of n on every shape, the measured table's half included.
    table = LinkFit(1e-3, 2e-3 / MIB, "t", sizes=(1 * MIB, 4 * MIB), times_s=(10e-3, 40e-3), table_ranks=2)
    for shape, f in ((Shape(1, 4), fits), (Shape(2, 2, "hierarchical"), fits), (Shape(2, 2), fits),
                     (Shape(1, 2), {"intra": table}), (Shape(1, 1), {})):  # fmt: skip
        halves = sum(bucket_cost_s(n, shape, f, c) for c in ("reduce_scatter", "all_gather"))
        assert halves == bucket_cost_s(n, shape, f)
    assert bucket_cost_s(2 * MIB, Shape(1, 2), {"intra": table}, "reduce_scatter") == pytest.approx(10e-3)


def test_zero1_and_zero2_by_hand():
    # DDP (test_one_node_two_ranks_by_hand): step 36, exposed 1, comm 8 ms. AG of all 5 MiB at p = 2:
    # 0.5 + 2.5 = 3 ms after the step. zero2: the buckets reduce-scattered, 1, 1.5, 1.5 ms: step 0
    # 1 -> 2, 6 -> 7.5, 9 -> 10.5 exposes 0.5; step 1 none: 0.25 + 3 exposed, steps 33.5 and 43.
    fits = {"intra": INTRA}
    ddp = predict(fwd_profile(), Shape(1, 2), 2.0, fits)
    z1 = predict_sharded(fwd_profile(), Shape(1, 2), 2.0, fits, Shard("zero1"))
    z2 = predict_sharded(fwd_profile(), Shape(1, 2), 2.0, fits, Shard("zero2"))
    assert (z1.step_ms, z1.exposed_ms, z1.comm_ms) == (ddp.step_ms + 3.0, ddp.exposed_ms + 3.0, ddp.comm_ms + 3.0)
    assert (z2.step_ms, z2.exposed_ms, z2.comm_ms) == pytest.approx((38.25, 3.25, 7.0), abs=1e-12)
    assert predict_sharded(fwd_profile(), Shape(1, 2), 2.0, fits, Shard("none")) == ddp


def test_zero1_is_ddp_plus_an_all_gather_and_zero2_never_exposes_more():
    # Over shapes, buckets, busy links, polling and compute contention: zero1 = DDP + AG(P) exactly,
    # zero2 never more exposed than zero1, and (α = 0) zero2 moves DDP's bytes: RS + AG = allreduce.
    busy = {"intra": LinkFit(2e-3, 1e-3 / MIB), "inter": LinkFit(3e-3, 5e-3 / MIB)}
    flat = {"intra": LinkFit(0.0, 1e-3 / MIB), "inter": LinkFit(0.0, 4e-3 / MIB)}
    for shape in (Shape(1, 2), Shape(1, 4), Shape(2, 2, "hierarchical"), Shape(4, 1)):
        for bucket, kw in ((1.0, {}), (2.0, {"busy_fits": busy}), (5.0, {"comm_slowdown": 2.0, "compute_scale": 1.5})):
            f = {lv: (INTRA if lv == "intra" else INTER) for lv in shape.levels()}
            ddp = predict(fwd_profile(), shape, bucket, f, **kw)
            z1, z2 = (predict_sharded(fwd_profile(), shape, bucket, f, Shard(m), **kw) for m in ("zero1", "zero2"))
            ag = bucket_cost_s(float(PARAM_BYTES.sum()), shape, f, "all_gather") * 1e3
            assert z1.step_ms == ddp.step_ms + ag and z1.exposed_ms == ddp.exposed_ms + ag
            assert z2.exposed_ms <= z1.exposed_ms and z2.step_ms <= z1.step_ms
            z2_bytes = predict_sharded(fwd_profile(), shape, bucket, flat, Shard("zero2")).comm_ms
            assert z2_bytes == pytest.approx(predict(fwd_profile(), shape, bucket, flat).comm_ms, rel=1e-12)


def test_zero3_units_gathered_ahead_by_hand():
    # Units of 2 MiB (backward order): [p3, p2] 2 MiB, [p1] 1, [p0] 2; AG = RS = 0.5 + n/2 ms: 1.5, 1, 1.5.
    # Forward (5 ms by bytes: p0's unit 2, p1's 1, then 2) with prefetch 1: g0 0 -> 1.5, f0 1.5 -> 3.5
    # while g1 1.5 -> 2.5; f1 3.5 -> 4.5 while g2 3.5 -> 5; f2 5 -> 7: 2 ms exposed.
    # Backward, step 0 (units ready at 2, 6, 9 of 10): g0 0 -> 1.5, b0 1.5 -> 3.5 (g1 1.5 -> 2.5),
    #   RS0 3.5 -> 5; b1 3.5 -> 7.5 (g2 queued behind RS0: 5 -> 6.5), RS1 7.5 -> 8.5; b2 7.5 -> 10.5,
    #   RS2 10.5 -> 12; the last 1 ms of compute to 11.5: 2 ms exposed. Step exposed 4: 34.
    # Step 1 (ready 0.5, 1, 2): b0 1.5 -> 2, RS0 2.5 -> 4; b1 2.5 -> 3, g2 4 -> 5.5, RS1 5.5 -> 6.5;
    #   b2 5.5 -> 6.5, RS2 6.5 -> 8; 8 ms of compute left: ends 14.5, 4.5 exposed. Step exposed 6.5: 46.5.
    fits = {"intra": INTRA}
    z3 = predict_sharded(fwd_profile(), Shape(1, 2), 2.0, fits, Shard("zero3", prefetch=1))
    assert (z3.buckets, z3.comm_ms) == (3, pytest.approx(12.0, abs=1e-12))  # 2 AG + 1 RS of 5 MiB, 3 calls each
    assert (z3.exposed_ms, z3.step_ms) == pytest.approx((5.25, 40.25), abs=1e-12)
    # Prefetch 0: every gather waits for the unit before it: forward 4 ms exposed, backward 7 and 6.5.
    z0 = predict_sharded(fwd_profile(), Shape(1, 2), 2.0, fits, Shard("zero3", prefetch=0))
    assert z0.exposed_ms == pytest.approx(10.75, abs=1e-12)
    # More prefetch never exposes more; without the regather, less is sent and less exposed.
    exposed = [
        predict_sharded(fwd_profile(), Shape(1, 2), 2.0, fits, Shard("zero3", 1.0, k)).exposed_ms for k in range(5)
    ]
    assert exposed == sorted(exposed, reverse=True) and exposed[0] > exposed[-1]
    off = predict_sharded(fwd_profile(), Shape(1, 2), 2.0, fits, Shard("zero3", reshard_after_forward=False))
    assert off.comm_ms == pytest.approx(8.0, abs=1e-12) and off.exposed_ms < z3.exposed_ms


def test_zero3_sends_one_and_a_half_ddp_and_its_backward_is_the_ddp_replay():
    # α = 0: AG(P) in forward, again in backward, RS(P): 3 halves of an allreduce of P (ZeRO: 3Ψ against 2Ψ).
    flat = {"intra": LinkFit(0.0, 1e-3 / MIB)}
    for unit in (0.5, 1.0, 3.0):
        ddp = predict(fwd_profile(), Shape(1, 4), 1.0, flat).comm_ms
        z3 = predict_sharded(fwd_profile(), Shape(1, 4), 1.0, flat, Shard("zero3", unit)).comm_ms
        assert z3 == pytest.approx(1.5 * ddp, rel=1e-12)
    # No gathers: the units' reduce-scatters replay backward exactly as DDP's buckets.
    for ready, costs in (([2.0, 6.0, 9.0], [2.0, 3.0, 3.0]), ([0.5, 1.0, 2.0], [4.0, 1.0, 2.0])):
        end, queue = gathered_phase(np.diff(ready, prepend=0.0), None, 1, costs)
        assert (max(end + 10.0 - ready[-1], queue) - 10.0, queue) == replay_step(ready, 10.0, costs)


def test_zero1_and_zero2_read_the_first_bucket_overlap_and_compute_scale_they_are_given():
    # zero1, --first-bucket-mb 2 (the profile says 1) over p = 4: allreduce 2(p-1)α + 2(p-1)/p·n·β
    # = 3 + 1.5·n[MiB] ms. Buckets (backward order) [p3, p2] 2 MiB, [p1] 1, [p0] 2: 6, 4.5, 6 ms
    # (a first bucket of 1 MiB would cut 1, 2, 2: 4.5, 6, 6 ms and expose 8 and 7 ms).
    # Step 0, ready max(1, 2) = 2, 6, 9: 2 -> 8, 8 -> 12.5, 12.5 -> 18.5: 8.5 exposed, step 38.5.
    # Step 1, ready 0.5, 1, 2: 0.5 -> 6.5, 6.5 -> 11, 11 -> 17: 7 exposed, step 47.
    # AG of all 5 MiB after the step: half of 3 + 7.5 = 5.25 ms. Medians: exposed 7.75 + 5.25 = 13,
    # step 42.75 + 5.25 = 48; comm 16.5 + 5.25 = 21.75; base (30 + 40) / 2 = 35.
    z1 = predict_sharded(profile(), Shape(1, 4), 2.0, {"intra": INTRA}, Shard("zero1"), first_bucket_mb=2.0)
    assert (z1.shape, z1.bucket_mb, z1.buckets, z1.base_step_ms, z1.compute_factor) == (Shape(1, 4), 2.0, 3, 35.0, 1.0)
    assert (z1.step_ms, z1.exposed_ms, z1.comm_ms) == pytest.approx((48.0, 13.0, 21.75), abs=1e-12)
    # zero2, --overlap off, compute twice as slow, p = 2: RS = 0.5 + n/2 ms on buckets of 1, 2, 2 MiB:
    # 1, 1.5, 1.5, all launched when backward ends (20 ms): 4 ms exposed in both steps (overlapped,
    # none would be), + AG(5 MiB) 3 ms. Steps 60 + 7 and 80 + 7: median 77; comm 4 + 3; the base
    # is the measured step, unscaled, and the prediction says by how much compute was scaled.
    z2 = predict_sharded(
        profile(), Shape(1, 2), 2.0, {"intra": INTRA}, Shard("zero2"), overlap=False, compute_scale=2.0
    )
    assert (z2.shape, z2.bucket_mb, z2.buckets, z2.base_step_ms, z2.compute_factor) == (Shape(1, 2), 2.0, 3, 35.0, 2.0)
    assert (z2.step_ms, z2.exposed_ms, z2.comm_ms) == pytest.approx((77.0, 7.0, 7.0), abs=1e-12)


def uneven_zero3_profile(forward_ms=(6.0,)):
    """One step: p0 1 MiB, p1 3 MiB; backward 10 ms, p1's gradient ready at 4 ms, p0's never
    recorded (NaN: taken at backward's end); forward 6 ms; a bf16-compressed wire (0.5)."""
    return Profile(
        total_ms=np.array([30.0]),
        backward_ms=np.array([10.0]),
        ready_ms=np.array([[np.nan, 4.0]]),
        param_bytes=np.array([1, 3]) * MIB,
        wire_factor=0.5,
        forward_ms=None if forward_ms is None else np.array(forward_ms),
    )


def test_zero3_on_unequal_units_a_compressed_wire_and_a_gradient_never_recorded_by_hand():
    # Units of 1 MiB: [p1] 3 MiB, [p0] 1 MiB (backward order). p = 2: AG = 0.5 + n/2 ms of the
    # weights, 2 and 1 ms; RS of the wire's bytes (half): 0.5 + 0.75 = 1.25 and 0.5 + 0.25 = 0.75 ms.
    # Forward, p0's unit first: 6 ms by bytes 1.5 + 4.5; gathers 1 then 2 ms. g0 0 -> 1, f0 1 -> 2.5
    # (g1 1 -> 3), f1 3 -> 7.5: 1.5 ms exposed. (p1's share first: 1 ms; p1's gather first: 2 ms.)
    # Backward: units launched at 4 and 10 (p0 NaN: at the end), segments 4 and 6 ms. g0 (2 ms)
    # 0 -> 2, b0 2 -> 6 (g1 2 -> 3), RS0 6 -> 7.25, b1 6 -> 12, RS1 12 -> 12.75; no compute after the
    # last unit: 2.75 ms exposed. Step 30 + 1.5 + 2.75; comm 2 x (2 + 1) + 1.25 + 0.75 = 8 ms.
    shard = Shard("zero3", unit_mb=1.0, prefetch=1)
    z3 = predict_sharded(uneven_zero3_profile(), Shape(1, 2), 25.0, {"intra": INTRA}, shard)
    assert (z3.shape, z3.bucket_mb, z3.buckets, z3.base_step_ms, z3.compute_factor) == (Shape(1, 2), 25.0, 2, 30.0, 1.0)
    assert (z3.step_ms, z3.exposed_ms, z3.comm_ms) == pytest.approx((34.25, 4.25, 8.0), abs=1e-12)
    # Compute twice as slow: forward 3 + 9 ms, g0 0 -> 1, f0 1 -> 4, f1 4 -> 13: 1 exposed. Backward
    # 20, launched at 8 and 20: g0 0 -> 2, b0 2 -> 10, RS0 10 -> 11.25, b1 10 -> 22, RS1 22 -> 22.75:
    # 2.75. Step 60 + 3.75; the base stays the measured 30 ms.
    z3 = predict_sharded(uneven_zero3_profile(), Shape(1, 2), 25.0, {"intra": INTRA}, shard, compute_scale=2.0)
    assert (z3.base_step_ms, z3.compute_factor) == (30.0, 2.0)
    assert (z3.step_ms, z3.exposed_ms, z3.comm_ms) == pytest.approx((63.75, 3.75, 8.0), abs=1e-12)
    # A profile without forward times: a forward of 0 ms, every gather exposed (1 + 2 ms): 3 + 2.75.
    z3 = predict_sharded(uneven_zero3_profile(None), Shape(1, 2), 25.0, {"intra": INTRA}, shard)
    assert (z3.step_ms, z3.exposed_ms) == pytest.approx((35.75, 5.75), abs=1e-12)


def test_state_memory_per_rank_as_the_zero_paper_counts_it():
    # bf16 weights, AdamW (16 B per parameter: 2 + 2 + 12), Ψ = 5 MiB / 2 parameters, N = 4:
    # DDP 16Ψ, zero1 4Ψ + 12Ψ/N, zero2 2Ψ + 14Ψ/N (+ the largest bucket, 2 MiB), zero3 16Ψ/N (+ the
    # units gathered at once: with prefetch 2 all three 2 MiB-capped units, the whole 5 MiB, never
    # 1 + prefetch times the largest, 6 MiB).
    psi, n = 5 * MIB / 2, 4
    mem = {m: state_memory(m, PARAM_BYTES, n, "adamw", "bf16", 2.0, 1.0, 2.0, 2) for m in SHARD_MODES}
    assert mem["none"].total == 16 * psi and mem["zero1"].total == 4 * psi + 12 * psi / n
    assert (mem["zero2"].total, mem["zero2"].in_flight) == (2 * psi + 14 * psi / n + 2 * MIB, 2 * MIB)
    assert (mem["zero3"].total, mem["zero3"].in_flight) == (16 * psi / n + 5 * MIB, 5 * MIB)
    # fp32 weights, SGD (momentum: 4 B): 12 B per parameter. 100 parameters of 1 MiB in 1 MiB units at
    # N = 2: zero3 holds half of everything plus two units, at most 0.55 of DDP.
    sizes = np.full(100, MIB)
    ddp, z3 = (state_memory(m, sizes, 2, "sgd", "fp32", 25.0, 1.0, 1.0, 1).total for m in ("none", "zero3"))
    assert ddp == 3 * 100 * MIB and z3 <= 0.55 * ddp


# A GPT's parameters in model order (models/gpt.cc): wte 400 B, wpe 80 B, 3 blocks of 12 parameters
# of 20 B each (240 B), the final LayerNorm's two of 4 B. fp32 weights: 4 B per element.
TINY_GPT = np.array([400, 80, *[20] * 36, 4, 4])


def test_the_pieces_are_the_trainers():
    # GPT: embed (wte, wpe), each block its 12, head the final norm and the tied wte.
    gpt = model_pieces("gpt2-tiny", len(TINY_GPT))
    assert gpt.uses[0] == (0, 1) and gpt.uses[1] == tuple(range(2, 14)) and gpt.uses[-1] == (38, 39, 0)
    assert gpt.unit == ("embed", "h.0", "h.1", "h.2", "head")
    # Block units own what their pieces use first (wte is the embedding's): backward order.
    assert block_units(gpt) == [[39, 38], *[list(range(13 + 12 * i, 1 + 12 * i, -1)) for i in (2, 1, 0)], [1, 0]]
    # torchvision's counts: ResNet-18 has 62 parameter tensors, ResNet-50 161; blocks by stage.
    r18, r50 = model_pieces("resnet18", 62), model_pieces("resnet50", 161)
    assert r18.unit == ("stem", *["layer1"] * 2, *["layer2"] * 2, *["layer3"] * 2, *["layer4"] * 2, "head")
    assert [len(u) for u in r18.uses] == [3, 6, 6, 9, 6, 9, 6, 9, 6, 2]
    assert [len(u) for u in r50.uses[:5]] == [3, 12, 9, 9, 12] and len(block_units(r50)) == 6
    assert model_pieces("gpt2-tiny", 41) is None and model_pieces("resnet18", 61) is None
    assert model_pieces("x", 9) is None


def test_each_resnets_pieces_and_block_units_are_its_parameters_by_hand():
    # torchvision's parameter counts: ResNet-34 110, ResNet-101 314, ResNet-152 467 (one more or
    # less: another layout, None).
    for name, n, blocks in (
        ("resnet34", 110, (3, 4, 6, 3)),
        ("resnet101", 314, (3, 4, 23, 3)),
        ("resnet152", 467, (3, 8, 36, 3)),
    ):
        p = model_pieces(name, n)
        assert p.unit == ("stem", *[f"layer{s + 1}" for s, c in enumerate(blocks) for _ in range(c)], "head")
        assert model_pieces(name, n - 1) is None and model_pieces(name, n + 1) is None
    # ResNet-18: stem conv1, bn1 (0-2); layer1's blocks 6 each (3-14); layers 2-4 open with a
    # downsample, 9 then 6 (15-29, 30-44, 45-59); head fc (60, 61). Block units: backward order.
    r18 = model_pieces("resnet18", 62)
    assert r18.uses[0] == (0, 1, 2) and r18.uses[1] == tuple(range(3, 9)) and r18.uses[-1] == (60, 61)
    assert block_units(r18) == [
        [61, 60],
        *[list(range(b + 14, b - 1, -1)) for b in (45, 30, 15)],
        list(range(14, 2, -1)),
        [2, 1, 0],
    ]
    # A GPT of no blocks (4 parameters): embed and head.
    assert model_pieces("gpt2-tiny", 4) == Pieces(((0, 1), (2, 3, 0)), ("embed", "head"))
    # Consecutive pieces of one name are one unit, the first piece's too; a layout whose names and
    # uses differ in length is refused.
    assert block_units(Pieces(((0,), (1,), (2,)), ("a", "a", "b"))) == [[2], [1, 0]]
    with pytest.raises(ValueError):
        block_units(Pieces(((0,), (1,)), ("a",)))


def _llama_names(tied: bool, attention_bias: bool = False, mlp_bias: bool = False, tmp_path=None) -> list:
    """transformers' LlamaForCausalLM's named_parameters (3 layers, built on the meta device: no
    weights), and with `tmp_path` its config.json written there."""
    transformers = pytest.importorskip("transformers")
    import torch

    config = transformers.LlamaConfig(
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=32,
        tie_word_embeddings=tied,
        attention_bias=attention_bias,
        mlp_bias=mlp_bias,
    )
    if tmp_path is not None:
        config.to_json_file(tmp_path / "config.json")
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    return [name for name, _ in model.named_parameters()]


def _llama_pieces_by_name(names: list) -> Pieces:
    """The pieces as models/llama.cc cuts them, by parameter name: embed_tokens; each layer's
    parameters by prefix; the final norm and lm_head, or the tied embed_tokens."""
    layers = sorted({int(n.split(".")[2]) for n in names if n.startswith("model.layers.")})

    def idx(prefix):
        return tuple(i for i, n in enumerate(names) if n.startswith(prefix))

    head = idx("model.norm.") + (idx("lm_head.") or idx("model.embed_tokens."))
    uses = (idx("model.embed_tokens."), *(idx(f"model.layers.{i}.") for i in layers), head)
    return Pieces(uses, ("embed", *(f"layers.{i}" for i in layers), "head"))


def test_each_llamas_pieces_are_its_parameters_by_name(tmp_path):
    # Untied (llama3-tiny, llama3.1-*): head = model.norm and lm_head, the last two.
    names = _llama_names(tied=False)
    for model in ("llama3-tiny", "llama3.1-8b", "llama3.1-70b", "llama3.1-405b"):
        assert model_pieces(model, len(names)) == _llama_pieces_by_name(names), model
    p = model_pieces("llama3-tiny", len(names))
    assert p.uses[0] == (0,) and p.uses[1] == tuple(range(1, 10)) and p.uses[-1] == (28, 29)
    # Tied (llama3.2-1b, -3b): head = model.norm and embed_tokens (0), which its embed unit owns.
    names = _llama_names(tied=True)
    for model in ("llama3.2-1b", "llama3.2-3b"):
        assert model_pieces(model, len(names)) == _llama_pieces_by_name(names), model
    tied = model_pieces("llama3.2-1b", len(names))
    assert tied.uses[-1] == (28, 0)
    assert block_units(tied) == [[28], *[list(range(9 + 9 * i, 9 * i, -1)) for i in (2, 1, 0)], [0]]
    # hf:PATH: the layout its config.json says (biases: 13 or 16 a layer), the file or its directory.
    for tied_, attention_bias, mlp_bias in ((False, True, False), (True, True, True), (False, False, True)):
        d = tmp_path / f"{tied_}{attention_bias}{mlp_bias}"
        d.mkdir()
        names = _llama_names(tied_, attention_bias, mlp_bias, tmp_path=d)
        for model in (f"hf:{d}", f"hf:{d / 'config.json'}"):
            assert model_pieces(model, len(names)) == _llama_pieces_by_name(names), model
    # Another count (one parameter more or less) is another layout; an unreadable hf: path unknown.
    n = len(_llama_names(tied=False))
    assert model_pieces("llama3-tiny", n + 1) is None and model_pieces("llama3-tiny", n - 1) is None
    assert model_pieces(f"hf:{tmp_path / 'none'}", n) is None


def _published_llama_bytes(hidden, layers, heads, intermediate, tied) -> np.ndarray:
    """bf16 bytes of each parameter of a published Llama 3 (vocabulary 128,256, 8 KV heads), in
    model order, from transformers' LlamaForCausalLM on the meta device."""
    transformers = pytest.importorskip("transformers")
    import torch

    config = transformers.LlamaConfig(
        vocab_size=128256,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=8,
        intermediate_size=intermediate,
        tie_word_embeddings=tied,
    )
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    return np.array([p.numel() for _, p in model.named_parameters()]) * 2


def test_zero3_state_of_the_published_llamas_by_hand():
    """bf16 weights, AdamW, 8 ranks, block units, prefetch 1, reshard on: the published counts, and
    the most zero3 gathers at once replayed over each Llama's pieces, worked out by hand."""
    # llama3.1-8b: embed V·C = 128,256 x 4,096 = 525,336,576; a layer q, o 4,096² each, k, v
    # 1,024 x 4,096 each, the MLP 3 x 4,096 x 14,336, two norms of 4,096: 218,112,000; head =
    # model.norm + lm_head = 525,340,672. Ψ = 2 x 525,336,576 + 4,096 + 32 x 218,112,000.
    sizes = _published_llama_bytes(4096, 32, 32, 14336, tied=False)
    assert sizes.sum() // 2 == 8_030_261_248
    pieces = model_pieces("llama3.1-8b", len(sizes))
    mem = state_memory("zero3", sizes, 8, "adamw", "bf16", 25.0, 1.0, None, 1, True, pieces, block_units(pieces))
    # P = G = 2Ψ/8, O = (4 + 8)Ψ/8; the peak: the head with the last layer prefetched (forward) or
    # gathered with it (backward), 2 x (525,340,672 + 218,112,000) B, each a multiple of 8 elements.
    assert (mem.params, mem.grads, mem.optim) == (2_007_565_312, 2_007_565_312, 12_045_391_872)
    assert mem.in_flight == 2 * (525_340_672 + 218_112_000)
    # llama3.2-1b (tied): embed 128,256 x 2,048 = 262,668,288; a layer 2 x 2,048² + 2 x 512 x 2,048
    # + 3 x 2,048 x 8,192 + 2 x 2,048 = 60,821,504; the head unit the final norm's 2,048.
    sizes = _published_llama_bytes(2048, 16, 32, 8192, tied=True)
    assert sizes.sum() // 2 == 1_235_814_400 == 262_668_288 + 16 * 60_821_504 + 2048
    pieces = model_pieces("llama3.2-1b", len(sizes))
    mem = state_memory("zero3", sizes, 8, "adamw", "bf16", 25.0, 1.0, None, 1, True, pieces, block_units(pieces))
    # The head uses the embedding, so it stays gathered from the first piece to the last, beside
    # a layer and the next one prefetched: 2 x (262,668,288 + 2 x 60,821,504) B (embed + one layer
    # if each unit were a piece of its own).
    assert mem.in_flight == 2 * (262_668_288 + 2 * 60_821_504)


def test_the_gathered_peak_is_set_by_forward_or_by_backward_each_replayed_apart():
    # Reshard on, prefetch 1, units in forward order, each piece's units; peaks by hand.
    # Forward sets it: a big tied head (100 B) is prefetched at the last block: embed 1 + h2 10 +
    # head 100 = 111; backward never holds the head with a block (at the head: 101).
    assert gathered_peak([1, 10, 10, 10, 100], [{0}, {1}, {2}, {3}, {4, 0}], 1, True) == 111
    # Backward sets it, in the middle: at piece 1 ({1, 2}) it prefetches unit 0 (100 B), which
    # forward freed after piece 0: 100 + 10 + 10 = 120 (forward's most: 100 + 10 at piece 0).
    assert gathered_peak([100, 10, 10, 1], [{0}, {1, 2}, {3}], 1, True) == 120
    # ... and at the last piece ({2, 3}), which prefetches unit 1 backward: 30 (forward's most: 20).
    assert gathered_peak([1, 10, 10, 10], [{0}, {1}, {2, 3}], 1, True) == 30
    # Pieces that hold no parameters gather nothing.
    assert gathered_peak([], [set(), set()], 1, True) == 0


def test_the_memory_formula_line_names_the_element_size_the_master_copy_and_the_optimizer_state():
    # Ψ parameters: fp32 weights 4 B each and SGD's momentum 4 B; bf16 weights 2 B each, an fp32
    # master copy 4 B and AdamW's two moments 8 B.
    assert describe_memory("sgd", "fp32") == "P = G = 4Ψ (fp32 weights), O = 4Ψ (sgd)"
    assert describe_memory("adamw", "bf16") == "P = G = 2Ψ (bf16 weights), O = fp32 master 4Ψ + 8Ψ (adamw)"


def test_recorded_unit_bytes_are_read_as_whole_parameters_or_not_at_all():
    # Parameters of 4, 4 and 4 B, cut from the last: 8 then 4 is [[2, 1], [0]]; 6 splits parameter
    # 1; 4 then 4 leaves parameter 0 in no unit; 4, 4, 4, 4 asks for one more than there is.
    assert units_from_bytes([4, 4, 4], [8, 4]) == [[2, 1], [0]]
    for unit_bytes in ([6, 6], [4, 4], [4, 4, 4, 4]):
        assert units_from_bytes([4, 4, 4], unit_bytes) is None, unit_bytes


def test_zero3_state_memory_replays_which_units_the_trainer_holds_by_hand():
    """The zero3 gathered peak as train/zero3.cc holds units (doc/model.md), on TINY_GPT over 2 ranks
    (no padding: every unit's elements are even). Block units: embed 480 B, h.i 240 B, head 8 B."""
    gpt = model_pieces("gpt2-tiny", len(TINY_GPT))
    blocks = block_units(gpt)

    def peak(n=2, prefetch=1, reshard=True, unit_mb=None, units=blocks, pieces=gpt):
        z3 = (unit_mb, prefetch, reshard, pieces, units)
        return state_memory("zero3", TINY_GPT, n, "sgd", "fp32", 25.0, 1.0, *z3).in_flight

    # Reshard off: nothing is freed in forward, so the end of forward holds every unit, 1208 B,
    # whatever the prefetch (1 + prefetch units of the largest: 480 or 960).
    assert [peak(prefetch=k, reshard=False) for k in (0, 1, 2)] == [1208] * 3
    # Reshard on, prefetch 0: the embedding (the head uses wte) and the block at hand, 720 (the
    # largest unit alone: 480). Prefetch 2: at h.0, embed + h.0 + h.1 + h.2 = 1200 (3 x 480 = 1440).
    assert peak(prefetch=0) == 720 and peak(prefetch=2) == 1200
    # Prefetch past the units holds every unit once: 1208, not 1025 x 480.
    assert peak(prefetch=1024) == 1208 == peak(prefetch=1024, reshard=False)
    # Padding: over 3 ranks the head's 2 elements are 3, 12 B: 480 + 720 + 12.
    assert peak(n=3, reshard=False) == 1212
    # Units of 120 B (whole parameters, reverse order, each at most the cap, as the trainer cuts
    # them): wte 400 | wpe + h.0's first 100 | h.0 p1-p6 120 | h.0 p7-p11 + h.1 p0 120 | ... | h.2
    # p7-p11 + the final norm 108. A block uses three units; forward at h.1 holds wte and all
    # three, 400 + 3 x 120 = 760: more than the block units' 720, not the largest unit's 400.
    assert [int(TINY_GPT[u].sum()) for u in units_of(TINY_GPT, 120 / MIB)] == [108, *[120] * 5, 100, 400]
    assert peak(prefetch=0, unit_mb=120 / MIB, units=None) == 760
    # Without the model's pieces each unit is taken as a piece of its own: 400.
    assert peak(prefetch=0, unit_mb=120 / MIB, units=None, pieces=None) == 400


def _train_file(path, hosts, ready=None, units=None, **attrs):
    """A synthetic dtune-train results file (train_fixture) of one run over `hosts`, 3 steps (1 of
    warm-up) of 40 ms, its parameters PARAM_BYTES; `ready`: the profile's gradient times (S, P);
    `units`: the bytes of its zero3 units (bucket_bytes, backward order)."""
    runs = [([40.0, 40.0, 40.0], None, {"rank_factors": (1.0,) * len(hosts), "model": "gpt2-tiny", **attrs})]
    train_file(path, runs, "dtune-train --model gpt2-tiny", hosts=hosts)
    with h5py.File(path, "a") as f:
        (g,) = f["runs"].values()
        g["param_bytes"] = PARAM_BYTES
        if ready is not None:
            g["grad_ready_ms"] = ready
        if units is not None:
            del g["bucket_bytes"]
            g["bucket_bytes"] = np.asarray(units, np.int64) * MIB


def test_check_models_each_zero3_run_with_its_own_units_prefetch_and_resharding(tmp_path, monkeypatch):
    """`dtune model check` predicts a zero3 run with the --shard-unit, --shard-prefetch and
    --reshard-after-forward it recorded (block units: the units it recorded in bucket_bytes; a run
    from before those attributes: block units, prefetch 0), from the 1-rank DDP profile, which
    none of them changes; the table names each run's settings."""
    from dtune_report import model_check
    from dtune_report.model_inputs import LinkFits, load_profiles

    _train_file(tmp_path / "profile.h5", ("h0",), ready=np.vstack([READY[:1], READY]))
    two = ("h0", "h0")
    z3 = {"shard": "zero3", "bucket_mb": 25.0}
    runs = {
        "mib": dict(shard_unit="1", shard_prefetch=0, reshard_after_forward=0),
        "block": dict(shard_unit="block", shard_prefetch=2, reshard_after_forward=1, units=[3, 2]),
        "older": dict(units=[1, 2, 2]),  # written before shard_unit and shard_prefetch: block, 0
    }
    for name, attrs in runs.items():
        _train_file(tmp_path / f"{name}.h5", two, **z3, **attrs)
    fits = LinkFits(by_ranks={("intra", 2, 0): INTRA})
    monkeypatch.setattr(model_check, "load_link_fits", lambda paths: fits)
    rows, notes = model_check.check(sorted(tmp_path.glob("*.h5")))
    assert not notes, notes
    prof = load_profiles([tmp_path / "profile.h5"])[0].profile
    want = {
        "mib": (Shard("zero3", 1.0, 0, False), "zero3:1,p0,off"),
        "block": (Shard("zero3", None, 2, True, ((3, 2, 1), (0,))), "zero3:block,p2,on"),
        "older": (Shard("zero3", None, 0, True, ((3,), (2, 1), (0,))), "zero3:block,p0,on"),
    }
    got = {Path(c.file).stem: c for c in rows}
    assert set(got) == set(want)
    default = predict_sharded(prof, Shape(1, 2), 25.0, {"intra": INTRA}, Shard("zero3"))
    for name, (shard, label) in want.items():
        expected = predict_sharded(prof, Shape(1, 2), 25.0, {"intra": INTRA}, shard)
        assert got[name].predicted == expected and got[name].shard_setting == label, name
        # Units of the bucket size, prefetch 1 and reshard on (what every run was modelled with) differ.
        assert expected.step_ms != default.step_ms, name
    table = model_check.format_check(rows, notes)
    assert all(f" {label} " in table for _, label in want.values()), table


def test_check_reads_each_run_s_mesh_a_data_parallel_one_in_any_order_and_names_a_pipeline(tmp_path, monkeypatch):
    """`dtune model check` reads a run's mesh from its mesh_* attributes (an older file's from
    pipeline_stages and pipeline_layout): a data-parallel run matches the 1-rank profile whatever
    order or layout it was written with (with one axis above 1 the order places no rank
    differently) and is predicted as DDP; a run with pipeline stages is named, not modelled."""
    from dtune_report import model_check
    from dtune_report.model_inputs import LinkFits, load_profiles

    _train_file(tmp_path / "profile.h5", ("h0",), ready=np.vstack([READY[:1], READY]))
    two = ("h0", "h0")
    mesh = {"mesh_tp": 1, "pipeline_layout": "across-nodes", "mesh_order": "tp,dp,pp"}
    _train_file(tmp_path / "ddp-across.h5", two, mesh_dp=2, mesh_pp=1, **mesh)
    _train_file(tmp_path / "pp-new.h5", two, mesh_dp=1, mesh_pp=2, pipeline_stages=2, **mesh)
    _train_file(tmp_path / "pp-old.h5", two, pipeline_stages=2)
    fits = LinkFits(by_ranks={("intra", 2, 0): INTRA})
    monkeypatch.setattr(model_check, "load_link_fits", lambda paths: fits)
    rows, notes = model_check.check(sorted(tmp_path.glob("*.h5")))
    (row,) = rows
    assert Path(row.file).stem == "ddp-across" and row.world_size == 2
    prof = load_profiles([tmp_path / "profile.h5"])[0].profile
    assert row.predicted == predict_sharded(prof, Shape(1, 2), 25.0, {"intra": INTRA}, Shard("none"))
    run = "0000-train-gpt2-tiny"
    assert sorted(notes) == [
        f"pp-new.h5:{run}: mesh pp2, not modelled (data parallelism only)",
        f"pp-old.h5:{run}: mesh pp2, not modelled (data parallelism only)",
    ]
