"""A real S3-protocol server on 127.0.0.1 for the remote run-folder tests: moto's server mode.

Credentials are dummy values given through the environment, as a user's would be; the tests check that they
never reach what a run stores.
"""

import os
from contextlib import contextmanager

ACCESS_KEY = "AKIAMOTOTESTKEY0000X"
SECRET_KEY = "moto-secret-must-never-be-stored-7f3a"


@contextmanager
def s3_server():
    """Start the server and point the AWS variables of this process at it; yields the variables (for a child
    process's environment)."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    variables = {
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_EC2_METADATA_DISABLED": "true",  # never ask an instance-metadata service for credentials
    }
    saved = {k: os.environ.get(k) for k in variables}
    os.environ.update(variables)
    try:
        boto3.client("s3").create_bucket(Bucket="bucket")
        yield variables
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


def secrets_in(folder) -> list[str]:
    """The files under `folder` that contain either credential."""
    from pathlib import Path

    return [
        str(p)
        for p in Path(folder).rglob("*")
        if p.is_file() and any(s.encode() in p.read_bytes() for s in (ACCESS_KEY, SECRET_KEY))
    ]
