"""Hostile shards built byte by byte, for the tests of the shard reader's limits.

Tar headers that ``tarfile`` would never write (sparse members, size claims past the end of the file, oversized or
chained extended headers) are made from ``tarfile.TarInfo.tobuf`` and patched where needed, with their checksum
recomputed, so the reader meets exactly what a damaged or malicious file holds.
"""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np

BLOCK = tarfile.BLOCKSIZE
END = b"\0" * (2 * BLOCK)  # the two zero blocks that end a tar


def write_tar(path, members) -> None:
    """A tar at ``path`` holding ``(name, bytes)`` members in order, written by ``tarfile`` itself."""
    with tarfile.open(path, "w") as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


def padded(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % BLOCK)


def header(name: str, size: int, kind: bytes = tarfile.REGTYPE, fmt: int = tarfile.GNU_FORMAT) -> bytes:
    """The header block(s) of a member claiming ``size`` bytes (GNU format writes huge sizes in base-256)."""
    info = tarfile.TarInfo(name)
    info.size, info.type, info.mtime = size, kind, 0
    return info.tobuf(format=fmt)


def member(name: str, data: bytes) -> bytes:
    return header(name, len(data)) + padded(data)


def tar_of(*parts: bytes) -> bytes:
    """A tar from members and raw blocks, in order, with its end blocks."""
    return b"".join(parts) + END


def jpeg(seed: int = 0, size: tuple[int, int] = (32, 24)) -> bytes:
    """A small JPEG whose pixels depend on ``seed`` (two seeds give two pictures)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(buf, format="JPEG")
    return buf.getvalue()


def sample(key: str, caption: str = "a red circle", seed: int = 0, ext: str = "jpg") -> list[bytes]:
    return [member(f"{key}.{ext}", jpeg(seed)), member(f"{key}.txt", caption.encode())]


def _with_checksum(block: bytearray) -> bytes:
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block[:BLOCK])
    return bytes(block)


def gnu_sparse_member(name: str, real_size: int, stored: bytes = b"x" * BLOCK) -> bytes:
    """A GNU sparse member (type ``S``): ``stored`` is its only data, the rest of ``real_size`` bytes are holes
    that a reader fills with zeros."""
    block = bytearray(header(name, len(stored)))
    block[156:157] = tarfile.GNUTYPE_SPARSE
    block[386:398] = tarfile.itn(0, 12, tarfile.GNU_FORMAT)  # first region: offset 0 ...
    block[398:410] = tarfile.itn(len(stored), 12, tarfile.GNU_FORMAT)  # ... holding the stored bytes
    block[482] = 0  # no extension blocks
    block[483:495] = tarfile.itn(real_size, 12, tarfile.GNU_FORMAT)
    return _with_checksum(block) + padded(stored)


def pax_sparse_member(name: str, real_size: int) -> bytes:
    """A GNU sparse member in PAX format 1.0 (``GNU.sparse.major/minor``): the map is the data's first block."""
    info = tarfile.TarInfo(f"./GNUSparseFile.0/{name}")
    data = padded(b"1\n0\n512\n") + b"x" * BLOCK
    info.size, info.mtime = len(data), 0
    info.pax_headers = {
        "GNU.sparse.major": "1",
        "GNU.sparse.minor": "0",
        "GNU.sparse.name": name,
        "GNU.sparse.realsize": str(real_size),
    }
    return info.tobuf(format=tarfile.PAX_FORMAT) + data


def pax_size_claim(name: str, claimed: int, data: bytes = b"x") -> bytes:
    """A member whose PAX header claims ``claimed`` bytes, followed by only ``data``."""
    info = tarfile.TarInfo(name)
    info.size, info.mtime = claimed, 0
    return info.tobuf(format=tarfile.PAX_FORMAT) + padded(data)


def pax_record(keyword: str, value: bytes) -> bytes:
    """One PAX record, ``"<length> <keyword>=<value>\\n"``, its length counting itself (as tarfile writes it)."""
    body = b" " + keyword.encode() + b"=" + value + b"\n"
    length = len(body) + 1
    while len(str(length)) + len(body) != length:
        length = len(str(length)) + len(body)
    return str(length).encode() + body


def extended_header(payload: bytes, kind: bytes = tarfile.XHDTYPE, name: str = "././@PaxHeader") -> bytes:
    """An extended header (PAX ``x``/``g`` or GNU ``L``/``K``) holding ``payload`` as it is."""
    return header(name, len(payload), kind, fmt=tarfile.USTAR_FORMAT) + padded(payload)


def chained_long_names(count: int, final: str) -> bytes:
    """``count`` GNU long-name headers in a row before one member: tarfile recurses once per header."""
    name = final.encode() + b"\0"
    return b"".join(extended_header(name, tarfile.GNUTYPE_LONGNAME, "././@LongLink") for _ in range(count))


def nested_json(depth: int) -> bytes:
    """A ``.json`` sidecar nested ``depth`` lists deep (json.loads recurses once per level)."""
    return b'{"references": ' + b"[" * depth + b"]" * depth + b"}"


def references_json(count: int) -> bytes:
    return json.dumps({"references": [f"a drawing number {i}" for i in range(count)]}).encode()


def write_parquet(path, columns: dict, **options) -> None:
    """A Parquet shard of ``columns`` (zstd: a cell of zeros compresses to almost nothing)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), path, compression="zstd", **options)
