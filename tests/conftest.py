"""Test configuration: offline Hugging Face stack and the shared tiny models.

The offline variables are set here, before any Hugging Face library is imported, so the suite never
tries the network (none is reachable in CI) and behaves the same on every machine.
"""

from __future__ import annotations

import os

for _var, _value in {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_EVALUATE_OFFLINE": "1",  # evaluate 0.4.6 reads its own variable, not HF_HUB_OFFLINE
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "GRADIO_ANALYTICS_ENABLED": "False",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ[_var] = _value

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
BENCHMARKS = SHARED / "benchmarks"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def benchmarks_dir() -> Path:
    """``../shared/benchmarks``; tests that need it skip cleanly when it is absent."""
    if not BENCHMARKS.is_dir():
        pytest.skip("../shared/benchmarks is not present on this machine")
    return BENCHMARKS


@pytest.fixture(scope="session")
def tiny_clip_dir(tmp_path_factory) -> Path:
    """A random tiny CLIP with the real CLIP tokenizer, saved as a transformers folder."""
    from capeval.shapes.tiny_clip import build_tiny_clip

    return build_tiny_clip(tmp_path_factory.mktemp("tiny-clip"), seed=0)


@pytest.fixture(scope="session")
def tiny_clip_dir_b(tmp_path_factory) -> Path:
    """A second random tiny CLIP (other seed, other input size 48) for tests that need two models."""
    from capeval.shapes.tiny_clip import build_tiny_clip

    return build_tiny_clip(tmp_path_factory.mktemp("tiny-clip-b"), seed=1, image_size=48, patch_size=16)


@pytest.fixture
def fresh_backbones():
    """No loaded backbone shared with another test: the cache of ``load_backbone`` cleared before and after (a test
    module asks for it for each of its tests with ``pytestmark = pytest.mark.usefixtures("fresh_backbones")``)."""
    from capeval.clip.backbones import clear_cache

    clear_cache(tokenizers=False)
    yield
    clear_cache(tokenizers=False)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_clip_dir):
    """A finished run of 23 rows (two of them error rows): the corpus, its output folder, its options and its
    summary (``tests/corpus_runs.py``), one per test module."""
    from tests.corpus_runs import finish_a_run

    return finish_a_run(tmp_path_factory.mktemp("finished-run"), str(tiny_clip_dir))


@pytest.fixture
def pinned_threads(monkeypatch):
    """torch's threads pinned as a user pins them (``OMP_NUM_THREADS``), for tests comparing two corpus runs bit for
    bit: left to follow the host's load, the thread count can change between the runs, and the float sums' order
    with it (scores differing by about 2e-7)."""
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", str(torch.get_num_threads()))


@pytest.fixture
def uploads():
    """A fresh folder inside Gradio's upload folder, as if files had been uploaded there."""
    import shutil
    import uuid

    from capeval.demo.uploads import upload_folder

    folder = upload_folder() / f"capeval-test-{uuid.uuid4().hex}"
    folder.mkdir(parents=True)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


_RAY_ENVIRONMENT: dict[str, str] = {}  # the variables the running local Ray was started with


def _local_ray(environment: dict[str, str]):
    """The tests' one local Ray (two CPUs, no dashboard), its workers started with ``environment`` among their
    variables: a Ray started without them is stopped and started again with them (a worker has the variables
    the Ray it runs in was started with, as on a user's nodes)."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized() and any(_RAY_ENVIRONMENT.get(k) != v for k, v in environment.items()):
        ray.shutdown()
    if not ray.is_initialized():
        with pytest.MonkeyPatch.context() as patch:
            for name, value in environment.items():
                patch.setenv(name, value)
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        _RAY_ENVIRONMENT.clear()
        _RAY_ENVIRONMENT.update(environment)
    return ray


@pytest.fixture(scope="module")
def local_ray():
    """The tests' one local Ray, started by the first module that needs it and shared by the rest of the session
    (Ray stops with the process); a module that shut it down leaves the next to start it."""
    return _local_ray({})


@pytest.fixture(scope="module")
def local_ray_with_s3(s3_endpoint):
    """The tests' one local Ray, its workers holding the S3 endpoint and keys of ``s3_endpoint`` in their
    environment (where a user's nodes would find them), for a module that reads shards on S3 on Ray."""
    from tests import s3_server

    return _local_ray(s3_server.environment(s3_endpoint))


@pytest.fixture(scope="session")
def s3_endpoint():
    """moto's S3 server on 127.0.0.1 (a free port), for the whole session, with the bucket ``s3_server.BUCKET``
    (``tests/s3_server.py``)."""
    from tests import s3_server

    server, endpoint = s3_server.start()
    yield endpoint
    server.stop()


@pytest.fixture(scope="session")
def img2dataset_run(tmp_path_factory):
    """A small site downloaded by the real img2dataset 1.47.0 into WebDataset and Parquet output (about 10 s);
    ``tests/img2dataset_runs.py`` says what the site holds."""
    import img2dataset_runs

    if not img2dataset_runs.COMMAND.exists():
        pytest.skip(
            f"{img2dataset_runs.COMMAND} is missing: scripts/test.sh makes the virtualenv .venv-img2dataset "
            "with img2dataset 1.47.0"
        )
    return img2dataset_runs.download(tmp_path_factory.mktemp("img2dataset"))
