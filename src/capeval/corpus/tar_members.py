"""A tar's members grouped into WebDataset samples, read with work bounded by the file's size.

WebDataset's reader (webdataset's ``tariterators.group_by_keys``) starts a new sample whenever a member's key
differs from the previous member's: a key that comes back after another key is a second sample, and a field
that repeats within one sample is an error. ``tar_samples`` groups the same way and never merges or drops a
member: a sample that holds a field twice keeps every member name, for its row's error to name them.

``tarfile`` parses the headers through ``_CheckedMember`` (``TarInfo._proc_member``, which tarfile's source names
as the method a subclass overrides to process members its own way), which refuses before ``tarfile`` acts:

- a member whose claimed size exceeds what the file still holds after its header (a PAX ``size=10**15``
  would make a streaming reader skip forward block by block for a day);
- sparse members (GNU type ``S``, PAX ``GNU.sparse.*``): their holes are filled with zeros when read, so a
  few bytes of file become up to ``MAX_MEMBER_BYTES`` of memory each; img2dataset never writes one;
- PAX (``x``, ``g``) and GNU long-name (``L``, ``K``) headers over ``MAX_EXTENDED_HEADER_BYTES``, a PAX header
  holding a run of digits over ``MAX_PAX_DIGIT_RUN`` (CPython's parser is quadratic in it, CVE-2024-6232), and
  more than ``MAX_CHAINED_HEADERS`` extended headers before one member (``tarfile`` recurses once per header).

After such a refusal nothing more of the file is read: its positions can no longer be trusted.

A tar is read from a path, from an open file that can seek (an fsspec file: its size is known, every check above
holds), or from a stream that cannot (a ``pipe:`` command's output), read forward once through
``capeval.corpus.forward_stream``. A stream's size is unknown until its end, so where a file's size bounds a claim,
``max_member_bytes`` bounds it on a stream: a member (or a non-file member whose data ``tarfile`` would skip)
claiming more ends the tar at its header, since skipping it would mean reading that many bytes with nothing to say
they are there; an extended header is still refused over ``MAX_EXTENDED_HEADER_BYTES``; a member cut short by the
stream's end ends the tar as a truncated file does; and after the end of the archive at most
``MAX_STREAM_TAIL_BYTES`` are read to look for data behind it (a file is read to its end).
"""

from __future__ import annotations

import os
import re
import tarfile
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from capeval.corpus.forward_stream import ForwardStream

# PAX (x, g) and GNU long-name (L, K) headers: a path of PATH_MAX (4,096 bytes) with its link target and times
# needs under 9 KiB; 64 KiB bounds what tarfile parses per header (its PAX parser is quadratic, below).
MAX_EXTENDED_HEADER_BYTES = 64 * 1024
# Digits in a row within a PAX header: the longest number a PAX record holds is a 20-digit size or a timestamp
# with nanoseconds (about 30 characters). Python 3.11.7's tarfile searches each header with re.search(rb"\d+
# hdrcharset=..."), quadratic in a run of digits (CVE-2024-6232: 160 KB of digits took 82 s here).
MAX_PAX_DIGIT_RUN = 64
# Extended headers before one member: a global header, a PAX header and GNU's long name and long link make 4;
# tarfile reads each chained header by recursion, so 400 of them (400 KB) raised RecursionError.
MAX_CHAINED_HEADERS = 8
# After the end of a tar read from a stream: writers pad to a record (GNU tar: 10 KiB of zeros); a stream is not
# read further than this to look for members behind a damaged header.
MAX_STREAM_TAIL_BYTES = 1024 * 1024
# Kept behind the position of a stream, for the steps back of the checks here: an extended header read twice.
_STREAM_KEEP_BYTES = 2 * MAX_EXTENDED_HEADER_BYTES
_EXTENDED = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)
_LONG_NAMES = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)
_DIGIT_RUN = re.compile(rb"[0-9]{%d}" % (MAX_PAX_DIGIT_RUN + 1))
_KINDS = {tarfile.SYMTYPE: "a symbolic link", tarfile.LNKTYPE: "a hard link", tarfile.CHRTYPE: "a character device",
          tarfile.BLKTYPE: "a block device", tarfile.FIFOTYPE: "a FIFO"}  # fmt: skip


class TarUnreadable(ValueError):
    """The tar cannot be read at all, or a header that names no member was refused (the reader wraps it)."""


class TarRefusal(Exception):
    """A header refused before ``tarfile`` acts on it; ``member`` is the member's name when the header names one.

    Not a ``tarfile.TarError``: ``TarFile.next`` passes it on instead of reading it as the end of the archive.
    """

    def __init__(self, message: str, member: str | None) -> None:
        super().__init__(message)
        self.member = member


@dataclass
class TarSample:
    """Consecutive members sharing one key: ``fields`` (extension -> bytes) of the extensions asked for,
    ``members`` (extension -> every member name with it), ``problem`` (why the sample cannot be scored)."""

    key: str
    fields: dict[str, bytes] = field(default_factory=dict)
    members: dict[str, list[str]] = field(default_factory=dict)
    problem: str | None = None

    def refuse(self, problem: str) -> None:
        self.problem = self.problem or problem


def member_key(name: str) -> tuple[str, str]:
    """WebDataset's grouping: the key is the path up to the first dot of the file name, the rest its extension."""
    folder, _, base = name.rpartition("/")
    stem, _, ext = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), ext.lower()


def _unsafe_name(name: str) -> str | None:
    parts = name.split("/")
    if name.startswith("/") or ".." in parts:
        return f"member name {name!r} leaves the shard (absolute or '..')"
    return None


class _CheckedMember(tarfile.TarInfo):
    """A ``TarInfo`` whose headers are checked before ``tarfile`` reads or skips what they claim."""

    def _proc_member(self, archive):
        depth = archive.header_depth
        if self.type in _EXTENDED or self.type in _LONG_NAMES:
            self._check_extended(archive, depth)
        archive.header_depth = depth + 1
        try:
            member = super()._proc_member(archive)
        finally:
            archive.header_depth = depth
        if depth == 0:  # the member itself, its extended headers applied
            _check_claims(member, archive)
        return member

    def _check_extended(self, archive, depth: int) -> None:
        where = f"extended header {self.name!r} at byte {self.offset}"
        if depth + 1 > MAX_CHAINED_HEADERS:
            raise TarRefusal(f"{where} is header {depth + 1} in a row (limit {MAX_CHAINED_HEADERS})", None)
        if not 0 <= self.size <= MAX_EXTENDED_HEADER_BYTES:
            raise TarRefusal(f"{where} is {self.size} bytes (limit {MAX_EXTENDED_HEADER_BYTES})", None)
        if archive.file_bytes is not None and self.size > archive.file_bytes - archive.fileobj.tell():
            raise TarRefusal(f"{where} claims {self.size} bytes past the end of the file", None)
        if self.type in _EXTENDED:
            start = archive.fileobj.tell()
            problem = _pax_problem(archive.fileobj.read(self.size))
            archive.fileobj.seek(start)
            if problem:
                raise TarRefusal(f"{where} {problem}", None)

    def _proc_sparse(self, archive):
        raise TarRefusal(_sparse(self.name, "GNU sparse member, type S"), self.name)

    def _proc_gnusparse_00(self, next, pax_headers, buf):
        raise _sparse_refusal(next, pax_headers, "PAX GNU.sparse 0.0")

    def _proc_gnusparse_01(self, next, pax_headers):
        raise _sparse_refusal(next, pax_headers, "PAX GNU.sparse 0.1")

    def _proc_gnusparse_10(self, next, pax_headers, archive):
        raise _sparse_refusal(next, pax_headers, "PAX GNU.sparse 1.0")


def _pax_problem(payload: bytes) -> str | None:
    """Why a PAX header is refused before tarfile parses it, in one pass: its records must be ``"<length>
    <keyword>=<value>\\n"`` end to end (tarfile's record loop rescans to the next ``=`` from every position a
    false length lands on, quadratic), with no run of digits over ``MAX_PAX_DIGIT_RUN``."""
    pos = 0
    while pos < len(payload):
        space = payload.find(b" ", pos, pos + 21)  # a length of at most 20 digits, then a space
        digits = payload[pos:space] if space > pos else b""
        end = pos + int(digits) if digits.isdigit() else -1
        # the shortest record after the space is "k=\n"; the "=" must come before the record's newline
        if (
            end < space + 4
            or end > len(payload)
            or payload[end - 1] != 0x0A
            or payload.find(b"=", space, end) < 0
        ):
            return f"is malformed: no '<length> <keyword>=<value>' record at its byte {pos}"
        pos = end
    run = _DIGIT_RUN.search(payload)
    if run:
        return (
            f"holds more than {MAX_PAX_DIGIT_RUN} digits in a row at its byte {run.start()} "
            "(Python's tarfile takes time quadratic in such a run)"
        )
    return None


def _sparse_refusal(member: tarfile.TarInfo, pax_headers: dict, form: str) -> TarRefusal:
    name = pax_headers.get("GNU.sparse.name", member.name)  # the member's own name (GNU stores a stand-in)
    return TarRefusal(_sparse(name, form), name)


def _sparse(name: str, form: str) -> str:
    return f"member {name} is a sparse file ({form}); refused: img2dataset never writes one"


def _check_claims(member: tarfile.TarInfo, archive) -> None:
    """Refuse sparse PAX keys and a size the rest of the file cannot hold (``tarfile`` would skip it)."""
    sparse = sorted(k for k in member.pax_headers if k.startswith("GNU.sparse."))
    if sparse:
        raise TarRefusal(_sparse(member.name, f"PAX {', '.join(sparse)}"), member.name)
    if not (member.isreg() or member.type not in tarfile.SUPPORTED_TYPES):
        return  # tarfile reads no data for folders and links, whatever their size field says
    if archive.file_bytes is None:  # a stream: its size is unknown, the member limit bounds a skip
        if not 0 <= member.size <= archive.max_member_bytes:
            raise TarRefusal(
                f"tar member {member.name} claims {member.size} bytes (limit {archive.max_member_bytes}) in a "
                "stream whose size is unknown: it is not skipped, and nothing after it is read",
                member.name,
            )
        return
    left = archive.file_bytes - member.offset_data
    if not 0 <= member.size <= left:
        raise TarRefusal(
            f"tar member {member.name} claims {member.size} bytes where the file holds {max(left, 0)} more: "
            "the tar is truncated or damaged, and nothing after it is read",
            member.name,
        )


class _ShardTar(tarfile.TarFile):
    tarinfo = _CheckedMember

    def __init__(self, *args, file_bytes: int | None, max_member_bytes: int, **kwargs) -> None:
        # Set first: TarFile.__init__ reads the first header. file_bytes is where the file ends (None: a stream).
        self.file_bytes = file_bytes
        self.max_member_bytes = max_member_bytes
        self.header_depth = 0
        super().__init__(*args, **kwargs)


def tar_samples(
    source: str | os.PathLike | BinaryIO, wanted: Collection[str], max_member_bytes: int
) -> Iterator[TarSample]:
    """The samples of the tar at ``source``, in order, with the bytes of the ``wanted`` extensions.

    ``source`` is a path, or a binary file object open for reading at the tar's first byte: one that can seek
    (an fsspec file) is read as a file, one that cannot (a pipe) as a stream (the module's docstring says what
    changes). A file object is left open: its owner closes it.

    A member over ``max_member_bytes``, one that is not a file, or one whose name leaves the shard gives its
    sample a ``problem`` and is not read. A refused header that names its member ends the tar with a last sample
    of that member's key carrying the refusal; a damaged tail, or data after the block where tarfile saw the
    end (an invalid header), ends it with the problem on the last sample.

    Raises:
        TarUnreadable: the file is no tar, or is damaged before any sample, or a refused header names no member.
    """
    if isinstance(source, (str, os.PathLike)):
        with open(Path(source), "rb") as fh:
            yield from _samples(fh, os.fstat(fh.fileno()).st_size, wanted, max_member_bytes)
        return
    if _can_seek(source):
        start = source.tell()
        end = source.seek(0, os.SEEK_END)
        source.seek(start)
        yield from _samples(source, end, wanted, max_member_bytes)
    else:
        yield from _samples(ForwardStream(source, _STREAM_KEEP_BYTES), None, wanted, max_member_bytes)


def _can_seek(fh) -> bool:
    try:
        return bool(fh.seekable())
    except (AttributeError, OSError, ValueError):  # no seekable(), or a closed or odd object: read it forward
        return False


def _samples(
    fh, file_bytes: int | None, wanted: Collection[str], max_member_bytes: int
) -> Iterator[TarSample]:
    """``tar_samples`` on an open file whose end is at ``file_bytes`` (None: a stream read forward)."""
    current: TarSample | None = None
    try:
        archive = _ShardTar(fileobj=fh, mode="r", file_bytes=file_bytes, max_member_bytes=max_member_bytes)
        while (member := archive.next()) is not None:
            archive.members.clear()  # a stream: no member is looked up again
            if member.isdir():
                continue  # a folder is no field of any sample
            key, ext = member_key(member.name)
            if current is None or key != current.key:
                if current is not None:
                    yield current
                current = TarSample(key)
            if not _add(current, archive, member, ext, wanted, max_member_bytes):
                break
        else:
            tail = None if file_bytes is not None else MAX_STREAM_TAIL_BYTES
            _check_tail(fh, archive.offset, current, tail)
    except TarRefusal as err:
        if err.member is None:
            raise TarUnreadable(f"{err}; the tar is not read") from err
        key = member_key(err.member)[0]
        if current is not None and current.key != key:
            yield current
            current = None
        current = current or TarSample(key)
        current.refuse(str(err))
    except (tarfile.TarError, OSError, EOFError) as err:
        if current is None:
            raise TarUnreadable(str(err)) from err
        current.refuse(f"tar ends inside a member ({err})")
    if current is not None:
        yield current


def _check_tail(fh, offset: int, last: TarSample | None, limit: int | None) -> None:
    """tarfile ends a tar at the first block that is no valid header; the end of a tar is zeros only, so data
    after that block means a damaged header, and the members behind it are not read: said, never silent.
    ``limit``: bytes read after ``offset`` at most (None: to the end)."""
    fh.seek(offset)
    left = limit
    while (left is None or left > 0) and (chunk := fh.read(1 << 20 if left is None else min(left, 1 << 20))):
        left = None if left is None else left - len(chunk)
        data = chunk.lstrip(b"\0")
        if data:
            where = fh.tell() - len(data)
            problem = (
                f"the tar has no valid header at byte {offset} but data at byte {where}: it is damaged, and "
                "nothing after it is read"
            )
            if last is None:
                raise TarUnreadable(problem)
            last.refuse(problem)
            return


def _add(
    sample: TarSample, archive, member: tarfile.TarInfo, ext: str, wanted: Collection[str], max_bytes: int
) -> bool:
    """Add one member to its sample; False when the tar must not be read further (its data is cut short)."""
    name = member.name
    names = sample.members.setdefault(ext, [])
    names.append(name)
    if len(names) > 1:
        shown = ", ".join(names)
        sample.refuse(f"sample {sample.key} has {len(names)} members for its field .{ext} ({shown})")
    unsafe = _unsafe_name(name)
    if unsafe:
        sample.refuse(unsafe)
        return True
    if not member.isfile():
        sample.refuse(
            f"member {name} is {_KINDS.get(member.type, f'of tar type {member.type!r}')}, not a file"
        )
        return True
    if member.size > max_bytes:
        sample.refuse(f"member {name} is {member.size} bytes (limit {max_bytes})")
        return True
    if ext not in wanted or len(names) > 1:
        return True  # other fields img2dataset or a user may add; a repeated field is never read
    fh = archive.extractfile(member)
    data = fh.read() if fh is not None else b""
    if len(data) != member.size:
        sample.refuse(f"tar member {name} is truncated ({len(data)} of {member.size} bytes)")
        return False
    sample.fields[ext] = data
    return True
