"""An S3 API for the tests: moto's server on 127.0.0.1, a client of it, and the variables that point boto3 and s3fs
at it (the ``s3_endpoint`` fixture of ``tests/conftest.py`` starts one for the session)."""

from __future__ import annotations

import logging
import os

BUCKET = "corpus"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}


def start():
    """``(server, endpoint)``: moto's S3 server started on a free port, with the bucket ``BUCKET``."""
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")  # botocore never asks the instance metadata
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client(endpoint).create_bucket(Bucket=BUCKET)
    return server, endpoint


def client(endpoint: str):
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, **CREDENTIALS)


def environment(endpoint: str) -> dict[str, str]:
    """The variables through which boto3 and s3fs find ``endpoint`` and its keys, as on a user's machine."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
