"""The synthetic trainer (fake_train.py) installed as an executable named dtune-train, for the tests
that run sweeps and the tuner without the real binary."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def install_fake_train(tmp_path: Path) -> Path:
    """tmp_path/bin with a dtune-train that runs fake_train.py; the directory, for DTUNE_BIN_DIR."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "dtune-train"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {HERE / "fake_train.py"} "$@"\n')
    exe.chmod(0o755)
    return bindir
