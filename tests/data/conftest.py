"""Fixtures for the data-pipeline tests: a real S3 server (moto's, in a thread) that checks the
SigV4 signature of every request, with helpers to make buckets and upload files.

moto verifies signatures only once IAM authentication is on: the fixture creates an IAM user with
an s3:* policy and an access key while auth is still off, then turns it on through moto's
/moto-api/reset-auth endpoint (what `set_initial_no_auth_action_count(0)` does in server mode) and
proves that a request signed with a wrong secret is refused before yielding.
"""

import importlib
import importlib.util
import json
import os
import socket
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# pytest imports every conftest.py as the module "conftest", and the one imported last wins
# `from conftest import ...` in test files. Re-export the helpers of tests/conftest.py (bin_dir,
# run_comm, ...) so that test files elsewhere keep working after this directory was collected.
_ROOT_CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"
_spec = importlib.util.spec_from_file_location("dtune_tests_root_conftest", _ROOT_CONFTEST)
_root = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_root)
for _name, _value in vars(_root).items():
    if not _name.startswith("_") and _name not in globals() and "fixture" not in type(_value).__name__.lower():
        globals()[_name] = _value
bin_dir = _root.bin_dir
REPO = _root.REPO

REGION = "us-east-1"
_USER = "dtune-test"
# s3 for the data, iam and sts so that a test can mint temporary credentials (assume_role).
_POLICY = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": ["s3:*", "iam:*", "sts:*"], "Resource": "*"}],
}
# Variables that would make a subprocess talk to something other than the fixture's server.
_FOREIGN_ENV = (
    "AWS_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL_S3",
    "AWS_DEFAULT_REGION",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "http_proxy",
    "HTTP_PROXY",
    "https_proxy",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
)


def require(module: str):
    """Import `module` or fail the test naming it: boto3, moto, torch and torchvision are pinned in
    requirements.txt, so a missing one is a broken environment, never a reason to skip."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        pytest.fail(f"{module} is not importable ({e}): requirements.txt pins it (scripts/setup.sh)", pytrace=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _set_auth_threshold(endpoint: str, count) -> None:
    """moto checks signatures after `count` unauthenticated requests (inf: never, 0: always)."""
    req = urllib.request.Request(
        f"{endpoint}/moto-api/reset-auth",
        data=str(count).encode(),
        method="POST",
        headers={"Content-Type": "text/plain"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        json.loads(r.read())


@dataclass
class S3Server:
    endpoint: str
    access_key: str
    secret_key: str
    region: str = REGION
    client: object = None  # a boto3 S3 client with the fixture's credentials
    env: dict = field(default_factory=dict)  # AWS_* variables for subprocesses

    def subprocess_env(self, **overrides) -> dict:
        """os.environ without foreign AWS/proxy settings, plus `env`, plus `overrides`."""
        e = {k: v for k, v in os.environ.items() if k not in _FOREIGN_ENV}
        e.update(self.env)
        e.update({k: str(v) for k, v in overrides.items()})
        return e

    def make_bucket(self, name: str) -> str:
        self.client.create_bucket(Bucket=name)
        return name

    def upload(self, bucket: str, objects: dict, prefix: str = "") -> None:
        """objects: {key: bytes}; stored as s3://bucket/<prefix>key."""
        for key, data in objects.items():
            self.client.put_object(Bucket=bucket, Key=prefix + key, Body=data)

    def upload_dir(self, bucket: str, directory, prefix: str = "") -> list:
        """Every file under `directory`, under the same relative keys; returns the keys."""
        root = Path(directory)
        keys = []
        for p in sorted(root.rglob("*")):
            if p.is_file():
                key = prefix + p.relative_to(root).as_posix()
                self.client.upload_file(str(p), bucket, key)
                keys.append(key)
        return keys

    def assume_role(self, name: str = "dtune-reader") -> dict:
        """Temporary credentials (AccessKeyId, SecretAccessKey, SessionToken) of a role with s3:*."""
        import boto3

        kw = dict(
            endpoint_url=self.endpoint,
            region_name=self.region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
        )
        iam, sts = boto3.client("iam", **kw), boto3.client("sts", **kw)
        trust = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}],
        }
        role = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]
        iam.put_role_policy(
            RoleName=name,
            PolicyName="s3-all",
            PolicyDocument=json.dumps(
                {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
            ),
        )
        return sts.assume_role(RoleArn=role["Arn"], RoleSessionName="dtune-test")["Credentials"]

    def url(self, bucket: str, prefix: str = "") -> str:
        return f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"


@pytest.fixture(scope="session")
def s3_server():
    boto3 = require("boto3")
    Config = require("botocore.config").Config
    ThreadedMotoServer = require("moto.server").ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    cfg = Config(proxies={}, retries={"max_attempts": 1}, s3={"addressing_style": "path"})
    try:
        # While auth is off any credentials do: create the user the tests will sign as.
        iam = boto3.client(
            "iam",
            endpoint_url=endpoint,
            region_name=REGION,
            config=cfg,
            aws_access_key_id="bootstrap",
            aws_secret_access_key="bootstrap",
        )
        iam.create_user(UserName=_USER)
        iam.put_user_policy(UserName=_USER, PolicyName="s3-all", PolicyDocument=json.dumps(_POLICY))
        key = iam.create_access_key(UserName=_USER)["AccessKey"]
        _set_auth_threshold(endpoint, 0)

        def client(secret):
            return boto3.client(
                "s3",
                endpoint_url=endpoint,
                region_name=REGION,
                config=cfg,
                aws_access_key_id=key["AccessKeyId"],
                aws_secret_access_key=secret,
            )

        srv = S3Server(
            endpoint=endpoint,
            access_key=key["AccessKeyId"],
            secret_key=key["SecretAccessKey"],
            client=client(key["SecretAccessKey"]),
        )
        srv.env = {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": srv.access_key,
            "AWS_SECRET_ACCESS_KEY": srv.secret_key,
            "AWS_REGION": REGION,
        }
        # Signature checking must really be on, or the tests below would prove nothing about it.
        from botocore.exceptions import ClientError

        with pytest.raises(ClientError) as refused:
            client("wrong" + key["SecretAccessKey"]).list_buckets()
        assert refused.value.response["Error"]["Code"] == "SignatureDoesNotMatch", refused.value
        yield srv
    finally:
        try:
            _set_auth_threshold(endpoint, "inf")
        finally:
            server.stop()
