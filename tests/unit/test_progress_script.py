"""scripts/progress.sh, which keeps scripts/main.sh talking: a step that is silent for longer than
the interval gets progress lines naming it, with the time so far and the estimate (the first-run
guess, then what the same step took last time, read back from the progress file), and its own output
and exit status pass through unchanged. The interval is 10 s in main.sh; 1 s here, with a step
silent for 5 s, so that a line must come whatever the machine's load."""

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(tmp_path, body):
    script = f"""
set -euo pipefail
source "{REPO}/scripts/progress.sh"
{body}
"""
    env = {"PATH": "/usr/bin:/bin", "DTUNE_PROGRESS_EVERY": "1", "DTUNE_PROGRESS_FILE": str(tmp_path / "times")}
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)


def test_a_silent_step_gets_progress_lines_with_its_estimate(tmp_path):
    body = """
progress_begin 2
expect quiet 30
progress_plan quiet after
expect after 7
step quiet bash -c 'echo first; sleep 5; echo last'
step after true
progress_end
"""
    r = run(tmp_path, body)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    # The time since progress_begin: +0s on a quiet machine, +1s seen in CI under load (2026-12-06).
    assert re.match(r"\[main \+\d+s\] step 1 of 2: quiet", lines[0]), lines[0]
    assert "first" in lines and "last" in lines
    ticks = [x for x in lines[lines.index("first") : lines.index("last")] if "quiet:" in x]
    assert ticks, lines
    tick = r"quiet: \d+s so far, about \d+s left \(a first run's guess: 30s\); then about 7s for the rest"
    assert re.search(tick, ticks[0]), ticks
    recorded = dict(line.split() for line in (tmp_path / "times").read_text().splitlines())
    assert int(recorded["quiet"]) >= 5
    # The next run's estimate is this run's time.
    r2 = run(tmp_path, "progress_begin 1\nexpect quiet 30\nstep quiet bash -c 'sleep 3'\n")
    assert f"(it took {recorded['quiet']}s last time)" in r2.stdout or "longer than expected" in r2.stdout, r2.stdout


def test_a_failing_step_fails_the_script_with_its_status(tmp_path):
    r = run(tmp_path, "progress_begin 1\nstep broken bash -c 'echo oops; exit 7'\necho not reached\n")
    assert r.returncode == 7
    assert "oops" in r.stdout and "not reached" not in r.stdout


def test_a_corrupt_progress_file_is_read_as_data_and_rewritten(tmp_path):
    # Issue 60: `sweep 1.5` stopped the job in bash's arithmetic at its first step, on every rerun;
    # a value like x[$(cmd)] ran cmd. Each malformed line is dropped and the file rewritten.
    pwned = tmp_path / "pwned"
    (tmp_path / "times").write_text(
        f"sweep 1.5\nprobe x[$(touch {pwned})]\nevil[$(touch {pwned})] 3\nmerge 4 extra\nreport 12\nhalf"
    )
    body = """
progress_begin 2
expect sweep 30
progress_plan sweep probe
expect probe 7
step sweep bash -c 'echo swept; sleep 2'
step probe true
progress_end
"""
    r = run(tmp_path, body)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not pwned.exists()
    assert "swept" in r.stdout and "ignored 5 malformed line(s)" in r.stdout, r.stdout
    recorded = dict(line.split() for line in (tmp_path / "times").read_text().splitlines())
    assert set(recorded) == {"report", "sweep", "probe"} and recorded["report"] == "12", recorded
    assert all(v.isdigit() for v in recorded.values()), recorded


def test_a_progress_line_never_lands_inside_a_half_printed_line(tmp_path):
    # The step prints half a line, stays silent past the interval, then ends the line: the progress
    # line stands on its own and the step's line arrives whole.
    body = """
progress_begin 1
step slow bash -c 'printf "half of "; sleep 3; echo "one line"'
"""
    r = run(tmp_path, body)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "half of one line" in lines, lines
    ticks = [x for x in lines if "slow:" in x and "so far" in x]
    assert ticks and all(x.startswith("[main +") for x in ticks), lines


def test_ctrl_c_lets_the_step_say_how_it_stopped(tmp_path):
    # Ctrl-C signals the whole foreground group; the copier of the step's output used to die with
    # it, so what the step printed as it stopped ("interrupted ... rerun to resume") was lost.
    import os
    import signal
    import time

    script = f"""
set -euo pipefail
source "{REPO}/scripts/progress.sh"
progress_begin 1
step sweep bash -c 'trap "kill %1; echo interrupted: rerun to resume; exit 130" INT; echo up; sleep 30 & wait'
"""
    env = {"PATH": "/usr/bin:/bin", "DTUNE_PROGRESS_EVERY": "5", "DTUNE_PROGRESS_FILE": str(tmp_path / "t")}
    p = subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
    assert "step 1 of 1: sweep" in p.stdout.readline()
    assert p.stdout.readline().strip() == "up"
    time.sleep(0.5)  # the step's trap is set before it prints "up"; the ticker's before it copies
    os.killpg(p.pid, signal.SIGINT)
    out = p.stdout.read()
    assert p.wait(timeout=30) != 0
    assert "interrupted: rerun to resume" in out, out
