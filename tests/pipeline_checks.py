"""What the pipeline tests check alike on CPU ranks (tests/mpi) and on GPUs (tests/gpu): the
stages' parameter dumps merged into one model, its difference to one process's parameters, and a
stage stopped mid-run (SIGSTOP) ending the whole job."""

import os
import signal
import subprocess
import threading
import time

import torch

from conftest import rank_pid


def merged_stage_dumps(dump, stages):
    """Every stage's `--debug-dump` (`<dump>.stage<S>`) as one dict; the end stages' copies of a
    tied parameter must be equal."""
    merged = {}
    for s in range(stages):
        for k, v in torch.load(f"{dump}.stage{s}", weights_only=False).items():
            if k.startswith("param.") and k in merged:
                assert torch.equal(merged[k], v), f"the end stages' copies of {k} differ"
            merged.setdefault(k, v)
    return merged


# Megatron's split (models/tensor_parallel.h), by parameter name: row-parallel weights are cut along
# their input (dimension 1); column-parallel layers, the vocabulary-split embeddings and heads
# along dimension 0; GPT-2's fused c_attn holds this rank's heads of q, then k, then v.
TP_ROWS = ("o_proj.weight", "down_proj.weight", "c_proj.weight")
TP_COLUMNS = ("q_proj.", "k_proj.", "v_proj.", "gate_proj.", "up_proj.", "c_fc.", "embed_tokens.", "lm_head.", "wte.")


def merged_tp_slices(slices):
    """The whole tensors of a dump from its tp ranks' dumps (in tp order); a tensor no rule names
    is whole on every rank (the norms, the position embedding, a row-parallel bias) and must be
    equal there."""
    merged = {}
    for k, first in slices[0].items():
        parts = [s[k] for s in slices]
        if k.endswith(TP_ROWS):
            merged[k] = torch.cat(parts, dim=1)
        elif any(c in k for c in TP_COLUMNS):
            merged[k] = torch.cat(parts, dim=0)
        elif "c_attn." in k:
            thirds = [p.chunk(3, dim=0) for p in parts]
            merged[k] = torch.cat([t[i] for i in range(3) for t in thirds], dim=0)
        else:
            assert all(torch.equal(p, first) for p in parts), f"{k} differs between the tp ranks"
            merged[k] = first
    return merged


def merged_tp_dumps(dump, stages, tp):
    """--debug-dump's files: one, one per stage (.stage<S>), and per tp coordinate (.tp<T>)."""
    if tp == 1:
        return merged_stage_dumps(dump, stages) if stages > 1 else torch.load(dump, weights_only=False)
    names = [f"{dump}.stage{s}" for s in range(stages)] if stages > 1 else [str(dump)]
    merged = {}
    for n in names:
        for k, v in merged_tp_slices([torch.load(f"{n}.tp{t}", weights_only=False) for t in range(tp)]).items():
            merged.setdefault(k, v)
    return merged


def relative_differences(got, ref, prefix="param."):
    """Per tensor under `prefix`: the largest difference relative to the reference's largest
    |value|. Both must hold the same tensors."""
    keys = [k for k in ref if k.startswith(prefix)]
    assert keys and sorted(k for k in got if k.startswith(prefix)) == sorted(keys)
    return {
        k: ((got[k].float() - ref[k].float()).abs().max() / ref[k].float().abs().max().clamp_min(1e-12)).item()
        for k in keys
    }


def max_rel(got, ref, prefix="param."):
    return max(relative_differences(got, ref, prefix).values())


def assert_equal_params(pipe, ref, tol=1e-5):
    for k, rel in relative_differences(pipe, ref).items():
        assert rel <= tol, f"{k}: relative difference {rel:.2e}"


def stop_rank_then_wait(cmd, settle_s, rank=1, timeout_s=180, resume_on_error=False):
    """Starts `cmd` (an mpirun of dtune-train), SIGSTOPs rank `rank` after `settle_s` seconds (past
    the set-up, into the steps) and waits for the job: (exit status, stderr, seconds from the stop
    to the end, resumed). With `resume_on_error`, the stopped rank is SIGCONTed the moment the first
    "dtune-train: error" line appears, and `resumed` says whether it was still there (mpirun may
    have killed it already); else None. Whatever is left is killed."""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines, resumed = [], []
    try:
        time.sleep(settle_s)
        victim = rank_pid(p.pid, rank, "dtune-train")
        assert victim, f"rank {rank} not found"
        os.kill(victim, signal.SIGSTOP)
        t0 = time.monotonic()

        def read():
            for line in p.stderr:
                lines.append(line)
                if resume_on_error and not resumed and line.startswith("dtune-train: error"):
                    try:
                        os.kill(victim, signal.SIGCONT)
                        resumed.append(True)
                    except ProcessLookupError:
                        resumed.append(False)

        reader = threading.Thread(target=read)
        reader.start()
        p.wait(timeout=timeout_s)
        took = time.monotonic() - t0
        reader.join(timeout=30)
        return p.returncode, "".join(lines), took, (resumed[0] if resumed else False) if resume_on_error else None
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
