"""The timing rule (doc/metrics.md, "Timing rule"; STYLE.md): work that may run on a GPU is timed
only on the device, through train/device_timeline.h, never with a host clock read around LibTorch or
CUDA calls that only queue kernels. Read from the sources, so that the next GPU path cannot forget it:

- the files that time model, optimizer or GEMM work read no host clock, except a line (or the line
  above it) saying `host clock:` and why that reading is not around device work (a step's origin,
  the common start the stages agree on);
- nowhere is torch::cuda::synchronize() called without a device index (it waits for the current
  device, GPU 0 on a thread that never set one, not the rank's GPU).
"""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Where compute is timed: every interval here must come from a DeviceTimeline.
DEVICE_TIMED = [
    "train/trainer.cc",
    "train/data_parallel_step.cc",
    "train/grad_timer.cc",
    "train/pipeline/pipeline_step.cc",
    "train/pipeline/piece_timer.cc",
    "benchmarks/probe/gemm.cc",
]
# Any clock's now() (Clock::now, steady_clock::now, an alias's), or a Stopwatch.
HOST_CLOCK = re.compile(r"::now\s*\(|\bStopwatch\b")
SYNC_NO_INDEX = re.compile(r"torch::cuda::synchronize\(\s*\)")


def host_clock_reads(text: str) -> list[str]:
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        code = line.split("//", 1)[0]
        if not HOST_CLOCK.search(code):
            continue
        if "host clock:" in line or (i > 0 and "host clock:" in lines[i - 1]):
            continue
        found.append(f"{i + 1}: {line.strip()}")
    return found


def test_device_timed_files_read_no_host_clock():
    offenders = {}
    for rel in DEVICE_TIMED:
        reads = host_clock_reads((REPO / rel).read_text())
        if reads:
            offenders[rel] = reads
    assert not offenders, (
        "host clock read where device work is timed (use train/device_timeline.h, or say "
        f"'host clock: <why>' on the line): {offenders}"
    )


def test_the_rule_catches_a_clock_around_a_call():
    planted = "  const auto t0 = Clock::now();\n  x = pieces[i].forward(x);\n  ms += since(t0);\n"
    assert host_clock_reads(planted) == ["1: const auto t0 = Clock::now();"]
    assert host_clock_reads("  // host clock: the step's origin\n  t = Clock::now();\n") == []
    assert host_clock_reads("  // Clock::now() in a comment\n") == []


def test_no_synchronize_of_the_current_device():
    offenders = []
    for path in sorted(REPO.glob("**/*.cc")):
        if any(part in {"build", ".venv", ".git"} or part.startswith("build") for part in path.relative_to(REPO).parts):
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if SYNC_NO_INDEX.search(line.split("//", 1)[0]):
                offenders.append(f"{path.relative_to(REPO)}:{n}")
    assert not offenders, f"torch::cuda::synchronize() without the rank's device index: {offenders}"
