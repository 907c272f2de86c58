"""The node cache across simulated nodes, shared by the mpirun (tests/cluster) and Slurm
(tests/slurm) tests: an S3 server (moto) on the cluster's bridge holding a small image dataset, and
the one figure they compare, dtune-data bench's fetched MB for an epoch summed over the ranks."""

import contextlib
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import bin_dir


@contextlib.contextmanager
def dataset_on_bridge(state: Path, base_env: dict):
    """Yields (env, total_mb): `base_env` without proxies or AWS settings, pointed at a server on
    the bridge's address (`state`: the cluster's state directory) holding s3://nodecache/ds, 32
    images in 4 shards; and the shards' size in MB, what one node fetches for one epoch."""
    boto3 = pytest.importorskip("boto3")
    server_mod = pytest.importorskip("moto.server")
    ip = (state / "subnet").read_text().strip() + ".1"
    with socket.socket() as probe:
        probe.bind((ip, 0))
        port = probe.getsockname()[1]
    server = server_mod.ThreadedMotoServer(ip_address=ip, port=port, verbose=False)
    server.start()
    try:
        endpoint = f"http://{ip}:{port}"
        env = {k: v for k, v in base_env.items() if not k.lower().endswith("_proxy") and not k.startswith("AWS_")}
        env.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="dtune", AWS_SECRET_ACCESS_KEY="dtune-secret")
        env.update(AWS_REGION="us-east-1")
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="dtune",
            aws_secret_access_key="dtune-secret",
        )
        s3.create_bucket(Bucket="nodecache")
        make = [bin_dir() / "dtune-data", "make", "images", "--out", "s3://nodecache/ds", "--samples", 32]
        make += ["--classes", 2, "--width", 96, "--height", 72, "--shard-samples", 8]
        r = subprocess.run([str(a) for a in make], capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stderr[-3000:]
        shards = s3.list_objects_v2(Bucket="nodecache", Prefix="ds/shard")["Contents"]
        yield env, sum(o["Size"] for o in shards) / 1e6
    finally:
        server.stop()


def bench_command(cache_dir: Path) -> list:
    """dtune-data bench over the dataset, every rank reading every sample (--debug-same-slice)
    through a node cache in `cache_dir`; prefix it with the launcher."""
    args = ["bench", "s3://nodecache/ds", "--batch", 4, "--image-size", 32, "--debug-same-slice"]
    args += ["--cache-dir", cache_dir, "--cache-block-mb", 0.0625, "--no-output"]
    return [str(a) for a in [bin_dir() / "dtune-data", *args]]


def fetched_mb(cmd: list, env: dict) -> float:
    """Runs `cmd` (a launcher, then bench_command) and returns the epoch's fetched MB over ranks."""
    r = subprocess.run([str(a) for a in cmd], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    (row,) = [ln.split() for ln in r.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
    return float(row[9])
