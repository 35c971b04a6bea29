"""Every executor gives the same rows: one matrix of odd and hostile sources, each scored by the local executor and
on Ray, compared case by case: every column of every row (key, shard, index, caption, origin, error, scores,
embeddings), the shards reported unreadable, what each output records of its input (the shard's identity and the
image files its rows read, which a rerun by either executor trusts), and per run the summary, the warnings,
``run.json`` and ``kept.jsonl``.

The cases are declared as data (``CASES``): what each writes and what its rows must hold. Cases that share the
options of a run are one group (``GROUPS``), given to ``score_corpus`` as one source (a list of shards, a folder of
row files, a dataset), so each executor runs once per group on the session's one Ray. Each case names its shards
by a prefix of its own, so its rows are found in the group's output. Batches of 3 rows cut the shards mid-way: on
Ray one actor call holds the end of one shard, an unreadable shard's failure marker or the start of the next.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("ray")

from capeval.corpus.run import score_corpus  # noqa: E402
from capeval.diagnostics.categories import CapevalWarning  # noqa: E402
from capeval.shapes import shapes_clip_path  # noqa: E402
from capeval.validation import MAX_REFERENCES  # noqa: E402
from capeval_dev.testing.shapes_shards import write_shapes_shards  # noqa: E402
from tests import hostile_shards as H  # noqa: E402
from tests import s3_server  # noqa: E402
from tests.test_image_formats import EPS, REFUSED  # noqa: E402
from tests.test_row_checks import write_hostile_rows  # noqa: E402

pytestmark = pytest.mark.slow
MODEL = str(shapes_clip_path())
METRICS = ["clipscore", "refclipscore"]
EMBEDDINGS = ("image_embedding", "text_embedding")
S3_FOLDER = "executors-agree"
S3_PREFIX = f"s3://{s3_server.BUCKET}/{S3_FOLDER}"
REFS = json.dumps({"references": ["a red circle"]}).encode()


@dataclass(frozen=True)
class Matches:
    """An error matching ``pattern`` (``re.search``)."""

    pattern: str

    def __call__(self, error: str | None) -> bool:
        return error is not None and re.search(self.pattern, error) is not None


def starts(text: str) -> Matches:
    return Matches("^" + re.escape(text))


def holds(text: str) -> Matches:
    return Matches(re.escape(text))


@dataclass(frozen=True)
class Site:
    """Where a case writes: its group's folder, 12 shapes samples (``{key: {"image", "caption", "references"}}``)
    and ``put(name, bytes)`` into ``S3_PREFIX``."""

    folder: Path
    samples: dict[str, dict]
    put: Callable[[str, bytes], None]


@dataclass(frozen=True)
class Case:
    """A source of odd or hostile rows.

    Attributes:
        name: the prefix of its shards' names (a shard file's name, or a row file's name and ``-``).
        group: the run it is scored in (``GROUPS``).
        write: writes its files into the site; returns what the group's source takes besides them (an S3
            pattern, a dataset).
        errors: ``{(shard suffix, row index): expected}``: None for a scored row, a text the error equals, or a
            ``Matches``.
        scored: how many of its rows are scored.
        failed: ``{shard suffix: Matches}``: the shards reported unreadable.
    """

    name: str
    group: str
    write: Callable[[Site], list]
    errors: dict[tuple[str, int], Any]
    scored: int
    failed: dict[str, Matches] = field(default_factory=dict)


@dataclass(frozen=True)
class Group:
    """The options one run of its cases shares, and the source they are given as.

    Attributes:
        source: ``(folder, what the cases' writers returned) -> source``.
        options: ``score_corpus``'s keywords.
        image_root: the group's folder is the image root.
        pixel_limit: ``PIL.Image.MAX_IMAGE_PIXELS`` as the caller set it, in the driver only.
    """

    source: Callable[[Path, list], Any]
    options: dict[str, Any]
    image_root: bool = False
    pixel_limit: int | None = None


def _shard_files(folder: Path, extra: list) -> list[str]:
    return sorted(str(p) for p in folder.iterdir() if p.suffix in (".tar", ".parquet")) + extra


GROUPS = {
    # Tars and Parquet files given as one list, beside shards on S3 read by each worker; two actors, embeddings,
    # DataComp's cut, and a pixel limit the caller lowered.
    "shards": Group(
        source=_shard_files,
        options={"batch_size": 3, "num_workers": 2, "save_embeddings": True, "top_fraction": 0.3},
        pixel_limit=20_000,
    ),
    # A folder of JSONL and CSV files, cut into shards of 5 rows, their images named by path; a threshold.
    "files": Group(
        source=lambda folder, extra: folder, options={"batch_size": 3, "chunk_size": 5, "threshold": -1.0}
    ),
    # A datasets dataset, its image paths read in an image root, from a column named by the caller where the
    # automatic choice would take another.
    "dataset": Group(
        source=lambda folder, extra: extra[0],
        options={"batch_size": 3, "chunk_size": 5, "image_column": "picture", "caption_column": "caption"},
        image_root=True,
    ),
}


# --- Shards: Parquet cells, damaged and hostile tars, formats, keys, a pixel limit, S3 ---


def _write_cells(site: Site) -> list:
    """Parquet cells a reader could take several ways: references as one string, references as binary, empty and
    null captions, null references, and a last shard holding its captions in another column, one an automatic
    choice would take: the choice made on the first shard holds, and the shard is reported."""
    samples = site.samples
    keys = list(samples)
    jpg = [samples[k]["image"] for k in keys]
    caption = [samples[k]["caption"] for k in keys]
    refs = [samples[k]["references"] for k in keys]
    pq.write_table(pa.table({
        "key": keys[0:3], "jpg": jpg[0:3], "caption": [caption[0], "", None],
        "references": pa.array(["a red circle"] * 3, pa.string()),
    }), site.folder / "cells-00000.parquet")  # fmt: skip
    pq.write_table(pa.table({
        "key": keys[3:5], "jpg": jpg[3:5], "caption": caption[3:5],
        "references": pa.array([b"a red circle", b'["a red circle"]'], pa.binary()),
    }), site.folder / "cells-00001.parquet")  # fmt: skip
    pq.write_table(pa.table({
        "key": keys[5:11], "jpg": jpg[5:11],
        "caption": [caption[5], "", None, caption[8], caption[9], caption[10]],
        "references": pa.array([refs[5], refs[6], refs[7], None, refs[9], refs[10]], pa.list_(pa.string())),
    }), site.folder / "cells-00002.parquet")  # fmt: skip
    pq.write_table(
        pa.table({"key": keys[11:12], "jpg": jpg[11:12], "text": caption[11:12]}),
        site.folder / "cells-00003.parquet",
    )
    return []


def _write_damaged(site: Site) -> list:
    """img2dataset's tars, damaged (shard 1: a corrupt JPEG, an empty .txt caption; shard 2: cut inside its last
    member), then a tar using one key twice, an unreadable one, and one whose header after 4 good samples is
    refused (read part-way: none of its rows is kept)."""
    made = site.folder.parent / "damaged-made"
    write_shapes_shards(made, shards=3, rows_per_shard=4, damaged=True)
    for tar in sorted(made.glob("*.tar")):
        shutil.copy(tar, site.folder / f"damaged-{tar.name}")
    samples = list(site.samples.values())
    members = []
    for key, sample in zip(["a", "b", "a", "c"], samples[:4], strict=True):
        members += [(f"{key}.jpg", sample["image"]), (f"{key}.txt", sample["caption"].encode()),
                    (f"{key}.json", json.dumps({"references": sample["references"]}).encode())]  # fmt: skip
    H.write_tar(site.folder / "damaged-00003.tar", members)
    (site.folder / "damaged-00004.tar").write_bytes(b"not a tar" * 100)
    good = [H.member(f"g{i}.{ext}", data) for i, sample in enumerate(samples[4:8])
            for ext, data in (("jpg", sample["image"]), ("txt", sample["caption"].encode()))]  # fmt: skip
    refused = H.extended_header(H.pax_record("path", b"1" * 200))  # a run of digits: refused by name
    (site.folder / "damaged-00005.tar").write_bytes(H.tar_of(*good, refused, *H.sample("z")))
    return []


def _write_hostile(site: Site) -> list:
    """A tar repeating a key; one whose sidecars nest too deep or hold too many references, beside a member
    claiming a petabyte; a Parquet cell over the member limit, in row groups of one row."""
    repeated = H.tar_of(*H.sample("a", seed=1), *H.sample("b", seed=2), *H.sample("a", seed=3))
    (site.folder / "hostile-00000.tar").write_bytes(repeated)
    (site.folder / "hostile-00001.tar").write_bytes(H.tar_of(
        *H.sample("nested"), H.member("nested.json", H.nested_json(100_000)),
        *H.sample("many"), H.member("many.json", H.references_json(MAX_REFERENCES + 1)),
        *H.sample("ok"), H.member("ok.json", H.references_json(2)),
        H.pax_size_claim("claim.jpg", 10**15),
    ))  # fmt: skip
    H.write_parquet(
        site.folder / "hostile-00002.parquet",
        {"key": ["big", "fine"], "jpg": [bytes(65 * 2**20), H.jpeg()], "caption": ["x", "y"],
         "references": [["r"], ["a red circle"]]},
        row_group_size=1,
    )  # fmt: skip
    return []


def _write_refs(site: Site) -> list:
    write_hostile_rows(site.folder, prefix="refs-")
    return []


def _write_eps(site: Site) -> list:
    """An EPS picture (which PIL would hand to Ghostscript) as a tar member and as a Parquet cell, each beside a
    PNG."""
    png = H.jpeg(4)
    H.write_tar(site.folder / "eps-00000.tar", [
        ("a.jpg", png), ("a.txt", b"a grey square"), ("a.json", REFS),
        ("b.jpg", EPS), ("b.txt", b"a line"), ("b.json", REFS),
    ])  # fmt: skip
    pq.write_table(
        pa.table({"key": ["a", "b"], "jpg": [png, EPS], "caption": ["a grey square", "a line"],
                  "references": [["a red circle"]] * 2}),
        site.folder / "eps-00001.parquet",
    )  # fmt: skip
    return []


def _write_surrogates(site: Site) -> list:
    """Tar sidecars holding lone surrogates (escaped in their JSON): a uid, a reference."""
    H.write_tar(site.folder / "surrogates-00000.tar", [
        ("a.jpg", H.jpeg(0)), ("a.txt", b"a black square"), ("a.json", rb'{"uid": "\ud800"}'),
        ("b.jpg", H.jpeg(1)), ("b.txt", b"a black square"), ("b.json", rb'{"references": ["\udfff"]}'),
        ("c.jpg", H.jpeg(2)), ("c.txt", b"a black square"), ("c.json", REFS),
    ])  # fmt: skip
    return []


def _write_keys(site: Site) -> list:
    """Keys a kept list could confuse: one holding a newline, one repeated across tars, one repeated within a
    Parquet file, and a null one."""
    H.write_tar(site.folder / "keys-00000.tar", [
        ("a.jpg", H.jpeg(5)), ("a.txt", b"a dark square"), ("a.json", REFS),
        ("b\nc.jpg", H.jpeg(6)), ("b\nc.txt", b"a square"), ("b\nc.json", REFS),
    ])  # fmt: skip
    H.write_tar(site.folder / "keys-00001.tar", [("a.jpg", H.jpeg(7)), ("a.txt", b"a grey square"),
                                                 ("a.json", REFS)])  # fmt: skip
    pq.write_table(
        pa.table({"key": pa.array(["d", "d", None], pa.string()), "jpg": [H.jpeg(i) for i in (8, 9, 10)],
                  "caption": ["a square"] * 3, "references": [["a red circle"]] * 3}),
        site.folder / "keys-00002.parquet",
    )  # fmt: skip
    return []


def _write_pixels(site: Site) -> list:
    """A picture of 30,000 pixels, over the caller's limit of 20,000 (set in the driver only), beside a small one."""
    H.write_tar(site.folder / "pixels-00000.tar", [
        ("big.jpg", H.jpeg(11, size=(200, 150))), ("big.txt", b"a big picture"), ("big.json", REFS),
        ("small.jpg", H.jpeg(12)), ("small.txt", b"a small picture"), ("small.json", REFS),
    ])  # fmt: skip
    return []


def _write_cut(site: Site) -> list:
    """A download cut short between two samples: a tar ending after two of its four samples, without end blocks."""
    import tarfile

    made = site.folder.parent / "cut-made"
    write_shapes_shards(made, shards=1, rows_per_shard=4)
    whole = (made / "00000.tar").read_bytes()
    with tarfile.open(made / "00000.tar") as archive:
        cut = archive.getmembers()[6].offset  # two samples of four (jpg, txt, json each)
    (site.folder / "cut-00000.tar").write_bytes(whole[:cut])
    return []


def _write_s3(site: Site) -> list:
    """img2dataset's tars, damaged, as objects on S3: each read task opens its shard there itself, finding the
    endpoint and keys in its environment (``local_ray_with_s3``)."""
    made = site.folder.parent / "s3-made"
    write_shapes_shards(made, shards=3, rows_per_shard=4, damaged=True)
    for tar in sorted(made.glob("*.tar")):
        site.put(f"s3-{tar.name}", tar.read_bytes())
    return [f"{S3_PREFIX}/s3-{{00000..00002}}.tar"]


DAMAGED = {
    ("00001", 1): starts("image of 000010001 cannot be read"),
    ("00001", 2): "sample 000010002 has an empty caption (.txt)",
    ("00002", 3): Matches("truncated|tar ends inside a member"),
}


def _cells_errors() -> dict:
    # The shapes samples' keys: 000000000 ... 000000011, one per Parquet row in order.
    key = [f"0000000{i:02d}" for i in range(12)]
    return {
        ("00000", 0): (
            f"row {key[0]} has references given as one string ('a red circle'), not a list of strings"
        ),
        ("00000", 1): f"row {key[1]} has an empty caption in column 'caption'",
        ("00000", 2): f"row {key[2]} has no caption in column 'caption'",
        ("00001", 0): f"row {key[3]} has references stored as binary (12 bytes), not a list of strings",
        ("00002", 3): f"row {key[8]} has no references (refclipscore needs them)",
        ("00002", 0): None,
        ("00002", 4): None,
        ("00002", 5): None,
    }


SHARD_CASES = [
    Case("cells", "shards", _write_cells, _cells_errors(), scored=3,
         failed={"00003": holds("has no caption column 'caption'; its columns: ['key', 'jpg', 'text']")}),
    Case("damaged", "shards", _write_damaged, {
        **DAMAGED,
        ("00003", 0): starts("key a names 2 samples of this shard (rows [0, 2]"),
        ("00003", 1): None,
        ("00003", 2): starts("key a names 2 samples of this shard (rows [0, 2]"),
        ("00003", 3): None,
    }, scored=4 + 2 + 3 + 2, failed={"00004": holds("is not a readable tar file"),
                                     "00005": holds("extended header")}),
    Case("hostile", "shards", _write_hostile, {
        ("00000", 0): starts("key a names 2 samples"),
        ("00000", 2): starts("key a names 2 samples"),
        ("00001", 0): starts(
            "the sidecar nested.json of sample nested nests arrays and objects more than 100 levels deep"
        ),
        ("00001", 1): starts(f"sample many (sidecar many.json) has {MAX_REFERENCES + 1} references, over the limit"),
        ("00001", 2): None,
        ("00001", 3): starts("tar member claim.jpg claims"),
        ("00002", 0): starts("row big: column 'jpg' of row group 0 (1 rows) holds"),
        ("00002", 1): None,
    }, scored=2),
    Case("refs", "shards", _write_refs, {
        ("00000", 0): "row s0 has references given as one string ('ab'), not a list of strings",
        ("00000", 1): "row s1 has references given as one string ('a black picture'), not a list of strings",
        ("00001", 0): "row b0 has references stored as binary (11 bytes), not a list of strings",
        ("00002", 0): None,  # a caption ending in NULs, kept as it is (checked in the rows' equality)
        ("00002", 1): (
            "row long has a caption of 65,537 bytes in column 'caption'; capeval reads at most 65,536 "
            "(capeval.corpus.row_checks.MAX_CAPTION_BYTES)"
        ),
        ("00002", 2): "row 2 of column 'key' has no key (null)",
        ("00002", 3): None,
    }, scored=2),
    Case("eps", "shards", _write_eps, {
        ("00000", 0): None, ("00000", 1): holds(REFUSED), ("00001", 0): None, ("00001", 1): holds(REFUSED),
    }, scored=2),
    Case("surrogates", "shards", _write_surrogates, {
        ("00000", 0): holds("not valid Unicode"), ("00000", 1): holds("not valid Unicode"), ("00000", 2): None,
    }, scored=1),
    Case("keys", "shards", _write_keys, {
        ("00000", 0): None, ("00000", 1): None, ("00001", 0): None, ("00002", 0): None, ("00002", 1): None,
        ("00002", 2): "row 2 of column 'key' has no key (null)",
    }, scored=5),
    Case("pixels", "shards", _write_pixels, {
        ("00000", 0): holds("exceeds limit of 20000 pixels"),
        ("00000", 1): None,
    }, scored=1),
    Case("cut", "shards", _write_cut, {("00000", 0): None, ("00000", 1): None}, scored=2),
    Case("s3", "shards", _write_s3, DAMAGED, scored=4 + 2 + 3),
]  # fmt: skip


# --- Row files: JSONL and CSV records, lone surrogates, paths leading out of the folder ---


def _records(site: Site) -> list[dict]:
    """Records a reader could take several ways, as JSON objects, naming their images by path: references as one
    string, references holding a number, an empty and a missing caption, a repeated id, and ordinary ones."""
    records = []
    for key, sample in site.samples.items():
        (site.folder / f"{key}.jpg").write_bytes(sample["image"])
        records.append({"id": key, "image": f"{key}.jpg", "caption": sample["caption"],
                        "references": sample["references"]})  # fmt: skip
    records[0]["references"] = "a red circle"
    records[1]["references"] = ["a red circle", 7]
    records[2]["caption"] = ""
    del records[3]["caption"]
    records[5]["id"] = records[4]["id"]
    return records


def _write_records_csv(site: Site) -> list:
    """The records as CSV, with a field over Python's own 128 KiB CSV limit in a column no metric reads."""
    with open(site.folder / "records.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "image", "caption", "references", "notes"])
        for i, r in enumerate(_records(site)):
            refs = r["references"] if isinstance(r["references"], str) else json.dumps(r["references"])
            writer.writerow([r["id"], r["image"], r.get("caption"), refs, "x" * 200_000 if i == 9 else ""])
    return []


def _write_records_jsonl(site: Site) -> list:
    """The records as JSONL, one line damaged."""
    lines = [json.dumps(r) for r in _records(site)]
    lines[6] = '{"id": "broken", "caption": '
    (site.folder / "records.jsonl").write_text("\n".join(lines) + "\n")
    return []


def _write_surrogate_lines(site: Site) -> list:
    """JSONL lines holding lone surrogates (escaped in their JSON): in a caption, an id, a url, a repeated field."""
    (site.folder / "a.jpg").write_bytes(H.jpeg(0))
    refs = '"references": ["a red circle"]'
    lines = [
        r'{"image": "a.jpg", "caption": "a black \ud800 square", ' + refs + "}",
        r'{"id": "\ud800", "image": "a.jpg", "caption": "a black square", ' + refs + "}",
        r'{"image": "a.jpg", "caption": "a black square", "url": "http://x/\udfff", ' + refs + "}",
        r'{"image": "a.jpg", "caption": "a black square", "\ud800": 1, "\ud800": 2, ' + refs + "}",
        r'{"image": "a.jpg", "caption": "a black square", ' + refs + "}",
    ]
    (site.folder / "surrogates.jsonl").write_text("\n".join(lines) + "\n")
    return []


def _write_within(site: Site) -> list:
    """Rows naming an image inside the data file's folder and one leading out of it."""
    (site.folder / "images").mkdir()
    (site.folder / "images" / "in.jpg").write_bytes(H.jpeg(1))
    (site.folder.parent / "private").mkdir()
    (site.folder.parent / "private" / "secret.jpg").write_bytes(H.jpeg(2))
    rows = [{"image": "images/in.jpg", "caption": "a picture", "references": ["a red circle"]},
            {"image": "../private/secret.jpg", "caption": "a picture", "references": ["a red circle"]}]  # fmt: skip
    (site.folder / "within.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return []


def _record_errors(where: str, line: Callable[[int], int], missing: str) -> dict:
    """The errors of ``_records`` rows (shards of 5 rows) in a file whose row ``i`` is named ``where.format(line(i))``."""
    return {
        ("00000", 1): f"{where.format(line(1))} has references that are not all text: reference 1 is int (7)",
        ("00000", 2): f"{where.format(line(2))} has an empty caption in field 'caption'",
        ("00000", 3): f"{where.format(line(3))} has {missing} in field 'caption'",
        ("00000", 4): None,
        ("00001", 0): None,  # the id of row 4 again: kept on both rows, and reported in the summary
    }


ROW_CASES = [
    Case("records.csv", "files", _write_records_csv, {
        # A CSV references cell holds a JSON list: one bare string is no JSON.
        ("00000", 0): Matches(r"^the 'references' field of records\.csv line 2 .*JSON list"),
        # A CSV cell cannot hold a null: a missing caption is an empty one there.
        **_record_errors("records.csv line {}", lambda i: i + 2, "an empty caption"),
        ("00001", 4): None,  # its long notes field, which no metric reads
    }, scored=8),
    Case("records.jsonl", "files", _write_records_jsonl, {
        ("00000", 0): (
            "records.jsonl line 1 has references given as one string ('a red circle'), not a list of strings"
        ),
        **_record_errors("records.jsonl line {}", lambda i: i + 1, "no caption"),
        ("00001", 1): Matches(r"^records\.jsonl line 7 .*JSON"),
    }, scored=7),
    Case("surrogates.jsonl", "files", _write_surrogate_lines, {
        ("00000", 0): holds("not valid Unicode"), ("00000", 1): holds("not valid Unicode"),
        ("00000", 2): holds("not valid Unicode"), ("00000", 3): holds('"\\ud800" appears twice'),
        ("00000", 4): None,
    }, scored=1),
    Case("within.jsonl", "files", _write_within, {
        ("00000", 0): None, ("00000", 1): holds("leads outside its data file's folder"),
    }, scored=1),
]  # fmt: skip


# --- A dataset ---


def _write_dataset(site: Site) -> list:
    """The records as a datasets dataset (null references on one row), each image's absolute path in ``picture``
    and another picture's in ``jpg``, the column an automatic choice would take."""
    import datasets

    records = _records(site)
    pictures = [str(site.folder / r["image"]) for r in records]
    references = [sample["references"] for sample in site.samples.values()]
    references[8] = None
    rows = [{"id": r["id"], "caption": r.get("caption"), "picture": pictures[i], "jpg": pictures[-1 - i],
             "references": references[i]} for i, r in enumerate(records)]  # fmt: skip
    return [datasets.Dataset.from_list(rows)]


DATASET_CASES = [
    Case("rows", "dataset", _write_dataset, {
        ("00000", 0): None, ("00000", 1): None,
        ("00000", 2): "row 2 has an empty caption in field 'caption'",
        ("00000", 3): "row 3 has no caption in field 'caption'",
        ("00001", 3): "row 000000008 has no references (refclipscore needs them)",
    }, scored=9),
]  # fmt: skip

CASES = SHARD_CASES + ROW_CASES + DATASET_CASES


@dataclass
class Run:
    """One executor's run of a group: its result, and the warnings of capeval's categories it gave, in order."""

    result: Any
    warnings: list[str]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, local_ray_with_s3, s3_endpoint):
    """Each group scored once by each executor: ``{group: {"local": Run, "ray": Run}}``."""
    import s3fs
    from PIL import Image

    root = tmp_path_factory.mktemp("agree")
    samples = write_shapes_shards(root / "samples", shards=1, rows_per_shard=12, kind="parquet")
    client = s3_server.client(s3_endpoint)

    def put(name: str, data: bytes) -> None:
        client.put_object(Bucket=s3_server.BUCKET, Key=f"{S3_FOLDER}/{name}", Body=data)

    results: dict[str, dict[str, Run]] = {}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in s3_server.environment(s3_endpoint).items():  # the driver's, as the workers'
            patch.setenv(name, value)
        s3fs.S3FileSystem.clear_instance_cache()  # a filesystem made before these variables would not see them
        for name, group in GROUPS.items():
            site = Site(root / name, samples, put)
            site.folder.mkdir()
            extra = [item for case in CASES if case.group == name for item in case.write(site)]
            source = group.source(site.folder, extra)
            options = {**group.options, "image_root": site.folder if group.image_root else None}
            results[name] = {}
            for executor in ("local", "ray"):
                with pytest.MonkeyPatch.context() as limit, warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    if group.pixel_limit is not None:
                        limit.setattr(Image, "MAX_IMAGE_PIXELS", group.pixel_limit)
                    result = score_corpus(source, root / f"{name}-{executor}", METRICS, model=MODEL,
                                          executor=executor, progress=False, **options)  # fmt: skip
                said = [
                    f"{w.category.__name__}: {w.message}"
                    for w in caught
                    if issubclass(w.category, CapevalWarning)
                ]
                results[name][executor] = Run(result, said)
    s3fs.S3FileSystem.clear_instance_cache()
    return results


def _mine(case: Case, shard: str) -> str | None:
    """The suffix of ``shard`` when it is one of ``case``'s (``cells-00001`` -> ``00001``), else None."""
    return shard[len(case.name) + 1 :] if shard.startswith(case.name + "-") else None


def _tables(run: Run, case: Case) -> dict[str, pa.Table]:
    """The case's shard outputs, by suffix."""
    files = sorted(run.result.scores.glob("*.parquet"))
    return {_mine(case, f.stem): pq.read_table(f) for f in files if _mine(case, f.stem) is not None}


def _pair(runs, case: Case) -> tuple[Run, Run]:
    return runs[case.group]["local"], runs[case.group]["ray"]


IDS = [case.name for case in CASES]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_executor_writes_the_same_rows(runs, case):
    local, ray = (_tables(run, case) for run in _pair(runs, case))
    assert sorted(ray) == sorted(local) and local
    for shard, table in local.items():
        a, b = table.to_pydict(), ray[shard].to_pydict()
        assert list(b) == list(a), shard  # the same columns, in the same order
        for column, values in a.items():
            if column in EMBEDDINGS:
                # Error rows have none (null) on both; the others are float16 of the same float32 vectors: at most
                # one float16 step (2**-11 near 0.1) apart.
                assert [v is None for v in b[column]] == [v is None for v in values], (shard, column)
                held = [i for i, v in enumerate(values) if v is not None]
                np.testing.assert_allclose(np.array([b[column][i] for i in held], dtype=float),
                                           np.array([values[i] for i in held], dtype=float), atol=1e-3)  # fmt: skip
            elif pa.types.is_floating(table.schema.field(column).type):
                np.testing.assert_allclose(np.array(b[column], dtype=float), np.array(values, dtype=float),
                                           atol=1e-6, equal_nan=True, err_msg=f"{shard}.{column}")  # fmt: skip
            else:
                assert b[column] == values, (shard, column)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_executor_records_the_same_input_and_image_files(runs, case):
    # What a rerun compares before it keeps a shard: written by either executor, it is the same footer.
    local, ray = (_tables(run, case) for run in _pair(runs, case))
    for shard, table in local.items():
        assert ray[shard].schema.metadata == table.schema.metadata, shard
    if case.name in ("records.csv", "within.jsonl", "rows"):  # rows naming their images by path
        assert all(json.loads(t.schema.metadata[b"capeval.image_files"]) for t in local.values())


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_executor_reports_the_same_unreadable_shards(runs, case):
    local, ray = (
        {_mine(case, s): why for s, why in run.result.summary["failed_shards"].items() if _mine(case, s)}
        for run in _pair(runs, case)
    )
    assert ray == local
    assert sorted(local) == sorted(case.failed)
    for shard, expected in case.failed.items():
        assert expected(local[shard]), (shard, local[shard])


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_each_case_gives_the_error_rows_it_is_made_of(runs, case):
    for run in _pair(runs, case):
        rows = {(shard, i): e for shard, t in _tables(run, case).items() for i, e in
                zip(t["index"].to_pylist(), t["error"].to_pylist(), strict=True)}  # fmt: skip
        for where, expected in case.errors.items():
            got = rows[where]
            assert expected(got) if callable(expected) else got == expected, (where, got)
        assert sum(e is None for e in rows.values()) == case.scored


def _assert_same(got, want, where: str = "summary") -> None:
    """``got`` equals ``want``, floats within 1e-6, in nested dicts and lists."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), where
        for key in want:
            _assert_same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            _assert_same(a, b, f"{where}[{i}]")
    elif isinstance(want, float):
        assert got == pytest.approx(want, abs=1e-6, nan_ok=True), where
    else:
        assert got == want, where


def _without_run_details(summary: dict) -> dict:
    return {
        k: v for k, v in summary.items() if k not in ("seconds", "rows_per_second", "executor", "kept_file")
    }


@pytest.mark.parametrize("group", GROUPS)
def test_every_executor_gives_the_same_summary_and_warnings(runs, group):
    local, ray = runs[group]["local"], runs[group]["ray"]
    assert ray.result.summary["executor"] == "ray" and local.result.summary["executor"] == "local"
    _assert_same(_without_run_details(ray.result.summary), _without_run_details(local.result.summary))
    assert ray.warnings == local.warnings
    assert any(w.startswith("DuplicateKeyWarning: ") for w in local.warnings)  # every group repeats a key


@pytest.mark.parametrize("group", GROUPS)
def test_every_executor_writes_the_same_run_record_and_kept_rows(runs, group):
    local, ray = runs[group]["local"].result, runs[group]["ray"].result
    assert json.loads((ray.output_dir / "run.json").read_text()) == json.loads(
        (local.output_dir / "run.json").read_text()
    )
    assert (ray.output_dir / "kept.jsonl").exists() == (local.output_dir / "kept.jsonl").exists()
    if local.kept is not None:
        assert ray.kept.read_text() == local.kept.read_text()


def test_the_matrix_holds_every_case_of_every_group():
    assert sorted({case.group for case in CASES}) == sorted(GROUPS)
    names = [case.name for case in CASES]
    assert len(set(names)) == len(names)
    assert not any(a != b and b.startswith(a + "-") for a in names for b in names)
