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
