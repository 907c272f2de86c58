"""scripts/setup.sh's Python environments, shared by every clone on a machine (one per hash of
requirements.txt): a clone that makes a new one never deletes one that another clone links to or
that a process still uses; an older one is removed only when nothing links to or maps it, and
every decision is said. The real setup.sh runs in throwaway clones with a stand-in bootstrap
Python (makes an environment in milliseconds, installs nothing) and a stand-in cmake, so only its
environment step does anything. Before the fix, the second clone's set-up deleted the first's
environment while that clone used it (issue 60)."""

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!/usr/bin/env bash
# -m venv DIR: an environment whose python is this script; -m pip ...: nothing to do
if [[ "$1 $2" == "-m venv" ]]; then mkdir -p "$3/bin" "$3/lib"; cp "$0" "$3/bin/python"; fi
exit 0
"""


def clone(tmp_path, name, requirements):
    c = tmp_path / name
    (c / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts/setup.sh", c / "scripts/setup.sh")
    (c / "requirements.txt").write_text(requirements)
    return c


def setup(tmp_path, c):
    tools = tmp_path / "tools"
    if not tools.exists():
        tools.mkdir()
        for name, body in (("python", FAKE_PYTHON), ("cmake", "#!/bin/sh\nexit 0\n")):
            (tools / name).write_text(body)
            (tools / name).chmod(0o755)
    env = {
        "PATH": f"{tools}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "DTUNE_SKIP_APT": "1",
        "DTUNE_VENV_ROOT": str(tmp_path / "envs"),
        "DTUNE_BOOTSTRAP_PYTHON": str(tools / "python"),
    }
    r = subprocess.run(["bash", c / "scripts/setup.sh"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def envs(tmp_path):
    return sorted(p.name for p in (tmp_path / "envs").iterdir())


def test_an_environment_another_clone_links_to_is_never_deleted(tmp_path):
    a, b = clone(tmp_path, "a", "numpy==1\n"), clone(tmp_path, "b", "numpy==2\n")
    setup(tmp_path, a)
    env_a = a.joinpath(".venv").resolve()
    out = setup(tmp_path, b)  # a new requirements file: a second environment
    assert len(envs(tmp_path)) == 2 and env_a.is_dir(), out
    assert f"kept {env_a}: a checkout links to it" in out, out
    # Clone a moves to b's requirements: its old environment is linked by nobody now, and the
    # next new environment's set-up removes it, saying so.
    (a / "requirements.txt").write_text("numpy==2\n")
    setup(tmp_path, a)
    assert a.joinpath(".venv").resolve() == b.joinpath(".venv").resolve()
    (b / "requirements.txt").write_text("numpy==3\n")
    out = setup(tmp_path, b)
    assert not env_a.exists() and f"removed {env_a}: no checkout links to it" in out, out
    assert a.joinpath(".venv").resolve().is_dir()  # a's current one (b's old one) is a's: kept
    assert len(envs(tmp_path)) == 2, envs(tmp_path)


def test_an_environment_a_process_still_uses_is_kept(tmp_path):
    a = clone(tmp_path, "a", "numpy==1\n")
    setup(tmp_path, a)
    env_a = a.joinpath(".venv").resolve()
    # A job started from a's environment, then a moves on: the job still maps a file of it.
    lib = env_a / "lib/libjob.so"
    shutil.copy("/bin/true", lib)
    hold = (
        f"import mmap, time; f = open({str(lib)!r}, 'rb'); m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)\n"
        "print('up', flush=True); time.sleep(60)"
    )
    job = subprocess.Popen(["python3", "-c", hold], stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "up"
        (a / "requirements.txt").write_text("numpy==2\n")
        out = setup(tmp_path, a)
        assert env_a.is_dir() and f"kept {env_a}: a checkout links to it or a process uses it" in out, out
    finally:
        job.kill()
        job.wait()


def test_an_environment_of_unknown_users_is_kept_and_named(tmp_path):
    old = tmp_path / "envs/venv-0123456789ab"
    (old / "bin").mkdir(parents=True)
    (old / ".dtune-complete").touch()  # made by an older setup.sh: no list of its checkouts
    out = setup(tmp_path, clone(tmp_path, "a", "numpy==1\n"))
    assert old.is_dir() and f"kept {old}: made by an older setup.sh" in out, out
    assert os.path.isdir(tmp_path / "a/.venv")
