"""dtune's S3 client (data/storage/s3_storage.cc) against a real S3 server: moto's, checking the
SigV4 signature of every request (see conftest.py). Driven through dtune_storage_tool; bytes are
compared with what boto3 uploaded. Retries and timeouts use small Python servers in front of moto
or standing alone: one that answers 503/429/500 a few times, one that accepts and never answers.
"""

import http.client
import re
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import bin_dir

BUCKET = "dtune-data"
PREFIX = "shards"
# Keys that need URI encoding (space, UTF-8, sub-delimiters) next to plain ones.
OBJECTS = {
    "a.bin": bytes(range(256)) * 40,
    "dir with space/ünïcødé €.bin": b"\x00\xff" * 3000 + b"tail",
    "sub/a+b=c&d;e,f@g.bin": b"plus and friends",
    "sub/tilde~_-.bin": b"x" * 17,
    "empty.bin": b"",
}
SIG = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(\w+)/(\d{8})/([\w-]+)/s3/aws4_request, "
    r"SignedHeaders=([\w;-]+), Signature=([0-9a-f]{64})$"
)


def tool(args, env, input_bytes=None, timeout=120):
    exe = bin_dir() / "dtune_storage_tool"
    if not exe.exists():
        pytest.fail(f"{exe} does not exist: build the dtune_storage_tool target first")
    return subprocess.run(
        [str(exe)] + [str(a) for a in args], env=env, input=input_bytes, capture_output=True, timeout=timeout
    )


def stats_of(stderr: bytes) -> dict:
    m = re.search(rb"stats requests=(\d+) bytes=(\d+) retries=(\d+)", stderr)
    assert m, stderr
    return dict(zip(("requests", "bytes", "retries"), map(int, m.groups())))


def one_error_line(r) -> str:
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dtune_storage_tool: error: "), r.stderr
    return lines[0]


@pytest.fixture(scope="module")
def data(s3_server):
    s3_server.make_bucket(BUCKET)
    s3_server.upload(BUCKET, OBJECTS, prefix=PREFIX + "/")
    s3_server.upload(BUCKET, {"outside.bin": b"not under the prefix"})
    return s3_server


def test_list_is_sorted_relative_and_sized(data):
    r = tool(["--stats", "ls", data.url(BUCKET, PREFIX)], data.subprocess_env())
    assert r.returncode == 0, r.stderr
    rows = [line.split("\t", 1) for line in r.stdout.decode().splitlines()]
    expected = sorted(OBJECTS.items(), key=lambda kv: kv[0].encode())
    assert rows == [[str(len(v)), k] for k, v in expected]
    assert stats_of(r.stderr) == {"requests": 2, "bytes": 0, "retries": 0}  # probe + one page


def test_list_follows_continuation_tokens(s3_server):
    # S3 (and moto) return at most 1000 keys per page: 2100 keys need three pages.
    bucket = s3_server.make_bucket("dtune-many")
    keys = [f"p/{i:05d}.bin" for i in range(2100)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: s3_server.client.put_object(Bucket=bucket, Key=k, Body=k.encode()), keys))
    r = tool(["--stats", "ls", s3_server.url(bucket, "p/")], s3_server.subprocess_env())
    assert r.returncode == 0, r.stderr
    rows = [line.split("\t") for line in r.stdout.decode().splitlines()]
    assert rows == [[str(len(k)), k[2:]] for k in keys]
    assert stats_of(r.stderr)["requests"] == 1 + 3


@pytest.mark.parametrize("key", sorted(OBJECTS))
def test_full_read_and_size(data, key):
    env = data.subprocess_env()
    r = tool(["--stats", "get", data.url(BUCKET, PREFIX), key], env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == OBJECTS[key]
    assert stats_of(r.stderr)["bytes"] == len(OBJECTS[key])
    r = tool(["size", data.url(BUCKET, PREFIX), key], env)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == len(OBJECTS[key])


@pytest.mark.parametrize("key", ["a.bin", "dir with space/ünïcødé €.bin"])
@pytest.mark.parametrize(
    "offset,length", [(0, 1), (7, 100), (1000, -1), (0, -1), ("end-10", 100), ("end", 5), ("end+99", 1)]
)
def test_range_reads_and_short_reads(data, key, offset, length):
    obj = OBJECTS[key]
    if isinstance(offset, str):  # relative to the end of the object
        offset = len(obj) + int(offset[3:] or 0)
    r = tool(["get", data.url(BUCKET, PREFIX), key, offset, length], data.subprocess_env())
    assert r.returncode == 0, r.stderr
    assert r.stdout == (obj[offset:] if length < 0 else obj[offset : offset + length])


def test_put_then_get_and_overwrite(data, tmp_path):
    env = data.subprocess_env()
    url = data.url(BUCKET, PREFIX)
    payload = bytes((i * 7 + 3) % 256 for i in range(300_000))
    src = tmp_path / "payload.bin"
    src.write_bytes(payload)
    key = "written/by dtune/ü.bin"
    assert tool(["put", url, key, src], env).returncode == 0
    assert data.client.get_object(Bucket=BUCKET, Key=f"{PREFIX}/{key}")["Body"].read() == payload
    assert tool(["get", url, key], env).stdout == payload
    r = tool(["put", url, key, "-"], env, input_bytes=b"replaced")
    assert r.returncode == 0, r.stderr
    assert tool(["get", url, key], env).stdout == b"replaced"


def test_missing_key_is_not_found_naming_it(data):
    for cmd in (["get"], ["size"]):
        r = tool(cmd + [data.url(BUCKET, PREFIX), "no/such key.bin"], data.subprocess_env())
        assert r.returncode == 2
        assert f"s3://{BUCKET}/{PREFIX}/no/such key.bin" in one_error_line(r)


def test_missing_bucket_is_not_found(data):
    r = tool(["ls", "s3://no-such-bucket/x"], data.subprocess_env())
    assert r.returncode == 2
    assert f"s3 bucket 'no-such-bucket' does not exist at {data.endpoint}" in one_error_line(r)


@pytest.mark.parametrize(
    "override,code",
    [
        ({"AWS_SECRET_ACCESS_KEY": "wrong-secret"}, "SignatureDoesNotMatch"),
        ({"AWS_ACCESS_KEY_ID": "AKIANOTAREALKEY00000"}, "InvalidAccessKeyId"),
    ],
)
def test_bad_credentials_are_rejected(data, override, code):
    r = tool(["ls", data.url(BUCKET, PREFIX)], data.subprocess_env(**override))
    assert r.returncode == 1
    line = one_error_line(r)
    assert "credentials were rejected" in line and code in line, line


def test_session_token_is_sent_and_signed(data):
    creds = data.assume_role()
    env = data.subprocess_env(
        AWS_ACCESS_KEY_ID=creds["AccessKeyId"],
        AWS_SECRET_ACCESS_KEY=creds["SecretAccessKey"],
        AWS_SESSION_TOKEN=creds["SessionToken"],
    )
    r = tool(["get", data.url(BUCKET, PREFIX), "a.bin"], env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == OBJECTS["a.bin"]
    env["AWS_SESSION_TOKEN"] = "not-the-token"
    r = tool(["get", data.url(BUCKET, PREFIX), "a.bin"], env)
    assert r.returncode == 1 and "credentials were rejected" in one_error_line(r)


def test_missing_credentials_and_malformed_urls_are_usage_errors(data):
    env = data.subprocess_env()
    del env["AWS_SECRET_ACCESS_KEY"]
    r = tool(["ls", data.url(BUCKET)], env)
    assert r.returncode == 2 and "set AWS_SECRET_ACCESS_KEY" in one_error_line(r)
    for url in ("s3://", "s3:///x", "s3://bad bucket/x", "gs://bucket/x"):
        r = tool(["ls", url], data.subprocess_env())
        assert r.returncode == 2, url
        assert url in one_error_line(r)


class FlakyProxy:
    """Answers the first `failures` requests with `status`, forwards the rest to moto unchanged
    (Host included, so the signature still holds), and records every request's headers."""

    def __init__(self, upstream: str, failures: int, status: int):
        self.failures, self.status, self.seen = failures, status, []
        host, port = upstream.rsplit("//", 1)[1].split(":")
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _handle(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with threading.Lock():
                    proxy.seen.append(dict(self.headers))
                    fail = len(proxy.seen) <= proxy.failures
                if fail:
                    err = b"<Error><Code>SlowDown</Code><Message>try later</Message></Error>"
                    self.send_response(proxy.status)
                    self.send_header("Content-Length", str(len(err)))
                    self.end_headers()
                    self.wfile.write(err)
                    return
                conn = http.client.HTTPConnection(host, int(port), timeout=30)
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for k, v in self.headers.items():
                    conn.putheader(k, v)
                conn.endheaders(body or None)
                resp = conn.getresponse()
                payload = resp.read()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(resp.getheader("Content-Length", len(payload))))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)
                conn.close()

            do_GET = do_HEAD = do_PUT = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("status", [503, 429, 500])
def test_transient_errors_are_retried(data, status):
    proxy = FlakyProxy(data.endpoint, failures=3, status=status)
    try:
        env = data.subprocess_env(AWS_ENDPOINT_URL=proxy.endpoint, DTUNE_S3_RETRIES=4)
        r = tool(["--stats", "get", data.url(BUCKET, PREFIX), "a.bin"], env)
        assert r.returncode == 0, r.stderr
        assert r.stdout == OBJECTS["a.bin"]
        # The probe failed 3 times, then it and the GET went through.
        assert stats_of(r.stderr) == {"requests": 5, "bytes": len(OBJECTS["a.bin"]), "retries": 3}
        assert len(proxy.seen) == 5
        # Every request, retries included, carried a SigV4 signature for this key and region.
        for h in proxy.seen:
            m = SIG.match(h.get("Authorization", ""))
            assert m, h
            assert m.group(1) == data.access_key and m.group(3) == data.region
            assert {"host", "x-amz-date", "x-amz-content-sha256"} <= set(m.group(4).split(";"))
            assert h["X-Amz-Date"].startswith(m.group(2))
    finally:
        proxy.close()


def test_retries_are_bounded(data):
    proxy = FlakyProxy(data.endpoint, failures=10**6, status=503)
    try:
        env = data.subprocess_env(AWS_ENDPOINT_URL=proxy.endpoint, DTUNE_S3_RETRIES=2)
        r = tool(["ls", data.url(BUCKET, PREFIX)], env)
        assert r.returncode == 1
        line = one_error_line(r)
        assert "HTTP 503 SlowDown" in line and "after 3 attempts" in line, line
        assert len(proxy.seen) == 3
    finally:
        proxy.close()


def test_a_server_that_never_answers_times_out(data):
    # Accepts connections (the kernel completes the handshake) and never sends a byte.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    accepted = []
    stop = threading.Event()

    def accept():
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(sock.accept()[0])
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        env = data.subprocess_env(
            AWS_ENDPOINT_URL=f"http://127.0.0.1:{sock.getsockname()[1]}", DTUNE_S3_TIMEOUT_S=1, DTUNE_S3_RETRIES=1
        )
        start = time.monotonic()
        r = tool(["ls", data.url(BUCKET, PREFIX)], env, timeout=60)
        elapsed = time.monotonic() - start
        assert r.returncode == 3, r.stderr  # TimeoutError, as core/main_guard.h
        line = one_error_line(r)
        assert "timed out" in line and "after 2 attempts" in line and "DTUNE_S3_TIMEOUT_S=1.0" in line, line
        # Two attempts of 1 s each plus one backoff of 50-150 ms: at least 2.05 s, and a busy machine
        # only adds to it, so the lower bound cannot flake. The upper bound tells the configured 1 s
        # from the default 30 s per attempt (60 s here) with room for any scheduling delay.
        assert 1.9 <= elapsed < 30, elapsed
        assert len(accepted) == 2
    finally:
        stop.set()
        t.join()
        for c in accepted:
            c.close()
        sock.close()


def test_concurrent_range_reads_from_many_threads(data):
    # The loader's pattern: one Storage, many threads, each with its own curl handle.
    big = bytes((i * 131 + 7) % 251 for i in range(3_000_000))
    data.upload(BUCKET, {"big.bin": big}, prefix=PREFIX + "/")
    chunk = 65_536 + 3  # the last chunk is short
    r = tool(["--stats", "pget", data.url(BUCKET, PREFIX), "big.bin", 8, chunk], data.subprocess_env())
    assert r.returncode == 0, r.stderr
    assert r.stdout == big
    chunks = -(-len(big) // chunk)
    assert stats_of(r.stderr) == {"requests": 2 + chunks, "bytes": len(big), "retries": 0}
