"""Where shards live: local folders, files, globs and lists as before; WebDataset's brace patterns; fsspec URLs
(the memory filesystem here; S3 in test_locations_s3.py); ``pipe:`` only from a command-line argument. Errors
name the pattern and what was found."""

from __future__ import annotations

import re
import uuid

import fsspec
import pytest

from capeval.corpus.file_identity import file_identity, identity_changes
from capeval.corpus.location_kinds import LocalShard, LocationError, PipeShard, RemoteShard
from capeval.corpus.locations import list_file_locations, list_locations, names_shards
from capeval.corpus.tar_members import tar_samples
from tests import hostile_shards as H

WANTED = ("jpg", "txt", "json")


def _tar(path, *keys):
    H.write_tar(
        path, [m for k in keys for m in ((f"{k}.jpg", H.jpeg()), (f"{k}.txt", f"caption {k}".encode()))]
    )
    return path


def _keys(location):
    with location.open() as fh:
        return [s.key for s in tar_samples(fh, WANTED, 2**20)]


@pytest.fixture
def img2dataset_folder(tmp_path):
    """img2dataset's layout: NNNNN.tar with NNNNN.parquet and NNNNN_stats.json beside, for 12 shards."""
    folder = tmp_path / "shards"
    folder.mkdir()
    for i in range(12):
        _tar(folder / f"{i:05d}.tar", f"{i:05d}0001")
        H.write_parquet(folder / f"{i:05d}.parquet", {"key": [f"{i:05d}0001"]})
        (folder / f"{i:05d}_stats.json").write_text("{}")
    return folder


# --- Local folders, files, globs and lists ---


def test_a_folder_is_read_from_its_tars_sorted_with_their_stems_as_names(img2dataset_folder):
    locations = list_locations(img2dataset_folder)
    assert [(loc.name, loc.kind) for loc in locations] == [(f"{i:05d}", "webdataset") for i in range(12)]
    assert all(isinstance(loc, LocalShard) for loc in locations)
    assert locations[3].url == str((img2dataset_folder / "00003.tar").resolve())
    assert locations[3].path == img2dataset_folder.resolve() / "00003.tar"
    assert _keys(locations[3]) == ["000030001"]


def test_a_folder_of_parquet_only_is_read_from_its_parquet_files(tmp_path):
    for i in range(2):
        H.write_parquet(tmp_path / f"part-{i}.parquet", {"key": ["a"]})
    assert [(loc.name, loc.kind) for loc in list_locations(tmp_path)] == [
        ("part-0", "parquet"),
        ("part-1", "parquet"),
    ]


def test_a_folder_without_shards_is_refused_naming_what_it_holds(tmp_path):
    (tmp_path / "a.jsonl").write_text("{}")
    with pytest.raises(LocationError, match=r"holds no \.tar or \.parquet shard \(found: \['\.jsonl'\]\)"):
        list_locations(tmp_path)


def test_a_glob_a_file_and_a_list_are_read_as_before(img2dataset_folder):
    by_glob = list_locations(str(img2dataset_folder / "0000[0-2].tar"))
    assert [loc.name for loc in by_glob] == ["00000", "00001", "00002"]
    by_list = list_locations([img2dataset_folder / "00005.tar", str(img2dataset_folder / "00001.parquet")])
    assert [(loc.name, loc.kind) for loc in by_list] == [("00001", "parquet"), ("00005", "webdataset")]


def test_a_glob_matching_nothing_names_the_folder_and_what_it_holds(img2dataset_folder):
    with pytest.raises(
        LocationError,
        match=r"no file matches '.*/\*\.tgz'; .*shards holds \['\.json', '\.parquet', '\.tar'\]",
    ):
        list_locations(str(img2dataset_folder / "*.tgz"))


@pytest.mark.parametrize(
    "name, message",
    [("notes.txt", "is not a shard: expected a .tar"), ("gone.tar", "shard '.*gone.tar' does not exist")],
)
def test_a_file_that_is_no_shard_or_does_not_exist_is_refused_by_name(tmp_path, name, message):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(LocationError, match=message):
        list_locations(str(tmp_path / name))


def test_two_shards_with_one_name_are_refused_naming_both(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = _tar(tmp_path / "a" / "00000.tar", "x"), _tar(tmp_path / "b" / "00000.tar", "y")
    with pytest.raises(
        LocationError, match="distinct file names.*'00000': \\[.*a/00000.tar', '.*b/00000.tar'\\]"
    ):
        list_locations([first, second])


def test_an_empty_list_or_a_non_path_item_is_refused():
    with pytest.raises(LocationError, match="the list of shards is empty"):
        list_locations([])
    with pytest.raises(LocationError, match=r"a path or URL string \(item 0 of the list\); got int"):
        list_locations([3])


def test_a_file_url_is_a_local_path(img2dataset_folder):
    [location] = list_locations(f"file://{img2dataset_folder}/00004.tar")
    assert isinstance(location, LocalShard) and location.name == "00004"


# --- Brace patterns, as webdataset expands them ---


def test_a_brace_pattern_names_its_zero_padded_files_in_order(img2dataset_folder):
    locations = list_locations(f"{img2dataset_folder}/{{00000..00011}}.tar")
    assert [loc.name for loc in locations] == [f"{i:05d}" for i in range(12)]
    two_braces = list_locations(f"{img2dataset_folder}/000{{0,1}}{{0..1}}.tar")
    assert [loc.name for loc in two_braces] == ["00000", "00001", "00010", "00011"]


def test_a_brace_pattern_naming_a_stem_twice_is_refused_as_two_shards_with_one_name(img2dataset_folder):
    with pytest.raises(LocationError, match="distinct file names"):
        list_locations(f"{img2dataset_folder}/0000{{0..1}}.{{tar,parquet}}")


def test_the_expansion_is_webdatasets_own(img2dataset_folder):
    from webdataset.shardlists import expand_urls

    from capeval.corpus.brace_patterns import expand

    for pattern in [
        "s/{00000..00099}.tar",
        "a{1..3}/b{x,y}.tar",
        "x/{8..11}.tar",
        "x/{a,{b,c}d}.tar",
        "x/{1}.tar",
    ]:
        assert expand(pattern) == expand_urls(pattern)


def test_a_brace_pattern_with_missing_names_says_which_and_how_many(img2dataset_folder):
    (img2dataset_folder / "00003.tar").unlink()
    (img2dataset_folder / "00007.tar").unlink()
    with pytest.raises(
        LocationError,
        match=r"brace pattern '.*/\{00000\.\.00011\}\.tar' names 12 files and 2 of them do not exist: "
        r".*/00003\.tar, .*/00007\.tar$",
    ):
        list_locations(f"{img2dataset_folder}/{{00000..00011}}.tar")


def test_a_brace_pattern_matching_no_file_names_the_folder_and_what_it_holds(img2dataset_folder):
    # The old reader said "no shard matches" of a pattern it never expanded.
    with pytest.raises(
        LocationError,
        match=r"matches no file: none of its 100 names exists \(.*/00100\.tar, .* and 95 more\); "
        r".*shards holds \['\.json', '\.parquet', '\.tar'\]",
    ):
        list_locations(f"{img2dataset_folder}/{{00100..00199}}.tar")
    with pytest.raises(LocationError, match=r"none of its 2 names exists .*; .* holds \['shards'\]"):
        list_locations(f"{img2dataset_folder.parent}/elsewhere/{{0..1}}.tar")


def test_a_brace_pattern_expanding_past_the_limit_is_refused(tmp_path, monkeypatch):
    import capeval.corpus.brace_patterns as patterns

    with pytest.raises(LocationError, match=r"expands to 100,000,000 names \(limit 1,000,000\)"):
        list_locations(f"{tmp_path}/{{0..99999999}}.tar")  # counted before braceexpand builds its range
    with pytest.raises(LocationError, match=r"expands to 1,099,511,627,776 names \(limit 1,000,000\)"):
        # Counted, not expanded: braceexpand took 158 s to give 20 of them, and 40 never end.
        list_locations(f"{tmp_path}/" + "x{a,b}" * 40 + ".tar")
    monkeypatch.setattr(patterns, "MAX_EXPANDED_NAMES", 10)
    with pytest.raises(LocationError, match=r"expands to 12 names \(limit 10\)"):
        list_locations(f"{tmp_path}/{{0..2}}{{0..3}}.tar")
    with pytest.raises(LocationError, match=r"expands to 12 names \(limit 10\)"):
        list_locations(f"{tmp_path}/{{a,b,c,d,e,f,g,h,i,j,k,l}}.tar")
    with pytest.raises(LocationError, match=r"has braces that do not balance"):
        list_locations(f"{tmp_path}/{{0..2.tar")


def test_the_names_are_counted_as_braceexpand_expands_them():
    import random

    from braceexpand import braceexpand

    from capeval.corpus import brace_patterns as patterns

    atoms = ["a", "{a,b}", "{1..3}", "{a..c}", "{x,{y,z}}", "{a}", "{", "}", ",", "\\{", "{0..10..3}", "{c..a}",
             "{,x}", "{{a,b},c}", "{01..03}", "{1..5..-2}", "{b..e..2}", "{-2..2}", "\\}"]  # fmt: skip
    rng = random.Random(0)
    for _ in range(3000):
        pattern = "".join(rng.choice(atoms) for _ in range(rng.randint(1, 6)))
        try:
            want = sum(1 for _ in braceexpand(pattern))
        except ValueError:  # braceexpand's UnbalancedBracesError
            with pytest.raises(patterns.PatternError, match="do not balance"):
                patterns.count_names(pattern)
            continue
        assert patterns.count_names(pattern) == want, pattern


# --- pipe: only from a command-line argument ---


def test_pipe_is_refused_unless_allowed_naming_the_item(img2dataset_folder):
    command = f"pipe:cat {img2dataset_folder}/00002.tar"
    with pytest.raises(
        LocationError, match="is a pipe: location, which runs a shell command: it is accepted only"
    ):
        list_locations(command)
    with pytest.raises(LocationError, match=r"\(item 1 of the list\) is a pipe: location"):
        list_locations([img2dataset_folder / "00001.tar", command])
    [location] = list_locations(command, allow_pipe=True)
    assert isinstance(location, PipeShard) and (location.name, location.kind) == ("00002", "webdataset")
    assert _keys(location) == ["000020001"]


def test_a_pipe_inside_a_list_is_refused_even_when_pipes_are_allowed(tmp_path, img2dataset_folder):
    ran = tmp_path / "ran"
    command = f"pipe:touch {ran}; cat {img2dataset_folder}/00002.tar"
    for listed in ([command], (img2dataset_folder / "00001.tar", command)):
        with pytest.raises(
            LocationError, match=r"\(item \d of the list\) is a pipe: location.*never as an item"
        ):
            list_locations(listed, allow_pipe=True)
    assert not ran.exists()


def test_braces_expand_in_a_pipe_command_and_the_last_tar_word_names_it(img2dataset_folder):
    locations = list_locations(f"pipe:cat {img2dataset_folder}/{{00000..00002}}.tar", allow_pipe=True)
    assert [loc.name for loc in locations] == ["00000", "00001", "00002"]
    [named] = list_locations("pipe:curl -s 'http://127.0.0.1:9/d/00042.tar?token=x' | cat", allow_pipe=True)
    assert named.name == "00042"


@pytest.mark.parametrize(
    "command, message",
    [
        (
            "pipe:echo hello",
            "cannot name the output of 'pipe:echo hello': no word of the command ends in .tar",
        ),
        ("pipe:cat a/00000.parquet", "names a Parquet file: Parquet is read where its footer says"),
    ],
)
def test_a_pipe_without_a_tar_to_name_it_is_refused(command, message):
    with pytest.raises(LocationError, match=message):
        list_locations(command, allow_pipe=True)


def test_a_list_file_never_runs_a_pipe_and_names_the_line(tmp_path, img2dataset_folder):
    listing = tmp_path / "shards.txt"
    listing.write_text(
        f"# shards\n{img2dataset_folder}/00001.tar\n\npipe:cat {img2dataset_folder}/00002.tar\n"
    )
    with pytest.raises(LocationError, match=r"\(line 4 of .*shards\.txt\) is a pipe: location"):
        list_file_locations(listing)


def test_a_list_file_reads_paths_relative_to_itself_and_urls(tmp_path, img2dataset_folder):
    listing = img2dataset_folder / "list.txt"
    fs = fsspec.filesystem("memory")
    prefix = f"/listed-{uuid.uuid4().hex}"
    fs.pipe_file(f"{prefix}/remote.tar", _tar(tmp_path / "remote.tar", "r").read_bytes())
    listing.write_text(
        f"00001.tar\n  {img2dataset_folder}/{{00002..00003}}.tar  \nmemory://{prefix}/remote.tar\n"
    )
    locations = list_file_locations(listing)
    assert [loc.name for loc in locations] == ["00001", "00002", "00003", "remote"]
    assert isinstance(locations[-1], RemoteShard) and _keys(locations[-1]) == ["r"]
    (tmp_path / "empty.txt").write_text("# nothing\n\n")
    with pytest.raises(LocationError, match="lists no shard"):
        list_file_locations(tmp_path / "empty.txt")


def test_a_file_named_like_a_pipe_found_by_a_glob_or_a_listing_is_refused(tmp_path):
    _tar(tmp_path / "pipe:rm -rf x.tar", "a")
    with pytest.raises(LocationError, match=r"'pipe:rm -rf x\.tar' was found by glob .* starts with 'pipe:'"):
        list_locations(str(tmp_path / "*.tar"))
    with pytest.raises(LocationError, match=r"was found in folder .* starts with 'pipe:'"):
        list_locations(tmp_path)


@pytest.mark.parametrize(
    "url, message",
    [
        ("dir://x/00000.tar", r"dir:// is a filesystem over another one \(fsspec's\)"),
        ("reference://x/00000.tar", r"reference:// is a filesystem over another one"),
        ("filecache://x/00000.tar", r"filecache:// is a filesystem over another one"),
        (
            "ftp://127.0.0.1:9/x/00000.tar",
            r"cannot be listed through fsspec's ftp:// filesystem \(Connection",
        ),
        (
            "nosuch://x/00000.tar",
            r"cannot be listed through fsspec's nosuch:// filesystem \(ValueError: Protocol",
        ),
    ],
)
def test_an_fsspec_url_that_cannot_be_used_is_refused_naming_it(url, message):
    with pytest.raises(LocationError, match=re.escape(repr(url)) + ".*" + message):
        list_locations(url)


# --- The memory filesystem, through the same fsspec code as s3:// ---


@pytest.fixture
def memory_shards(tmp_path):
    """Three tars and img2dataset's side files in a fresh folder of fsspec's memory filesystem."""
    fs = fsspec.filesystem("memory")
    prefix = f"/shards-{uuid.uuid4().hex}"
    for i in range(3):
        fs.pipe_file(f"{prefix}/{i:05d}.tar", _tar(tmp_path / f"{i}.tar", f"k{i}").read_bytes())
        fs.pipe_file(f"{prefix}/{i:05d}.parquet", b"metadata")
    fs.pipe_file(f"{prefix}/nested/00009.tar", b"")
    yield f"memory://{prefix}"
    fs.rm(prefix, recursive=True)


def test_a_memory_folder_a_glob_a_brace_pattern_and_a_file_are_listed(memory_shards):
    listed = list_locations(f"{memory_shards}/")
    assert [(loc.name, loc.kind) for loc in listed] == [(f"{i:05d}", "webdataset") for i in range(3)]
    assert all(isinstance(loc, RemoteShard) for loc in listed)
    assert listed[0].url == f"{memory_shards}/00000.tar"
    assert [loc.name for loc in list_locations(f"{memory_shards}/*.parquet")] == ["00000", "00001", "00002"]
    assert [loc.name for loc in list_locations(f"{memory_shards}/{{00001..00002}}.tar")] == ["00001", "00002"]
    [one] = list_locations(f"{memory_shards}/00002.tar")
    assert _keys(one) == ["k2"]


def test_a_missing_memory_file_or_pattern_names_the_folder_and_what_it_holds(memory_shards):
    with pytest.raises(
        LocationError,
        match=r"shard 'memory://.*/00007\.tar' does not exist; memory://.* holds \['\.parquet', '\.tar', 'nested/'\]",
    ):
        list_locations(f"{memory_shards}/00007.tar")
    with pytest.raises(
        LocationError, match=r"names 4 files and 1 of them do not exist: memory://.*/00003\.tar"
    ):
        list_locations(f"{memory_shards}/{{00000..00003}}.tar")
    with pytest.raises(
        LocationError, match=r"00000\.tar' does not exist; memory:///nowhere-\w+ does not exist \(for s3"
    ):
        list_locations(f"memory://nowhere-{uuid.uuid4().hex}/deeper/00000.tar")


def test_a_memory_file_is_identified_by_size_and_modification_time_and_an_overwrite_shows(
    memory_shards, tmp_path
):
    [location] = list_locations(f"{memory_shards}/00001.tar")
    before = location.identity()
    assert before["checked_by"] == "mtime" and before["size"] == len(
        _tar(tmp_path / "x.tar", "k1").read_bytes()
    )
    assert identity_changes(before, location.identity()) == []
    fs, path = location.filesystem()
    fs.pipe_file(path, _tar(tmp_path / "y.tar", "other").read_bytes())
    changes = identity_changes(before, location.identity())
    assert changes and changes[-1].startswith("modification time ")


# --- Identity of local files and pipes ---


def test_a_local_identity_is_what_shard_outputs_record_and_a_rewrite_shows(img2dataset_folder):
    [location] = list_locations(img2dataset_folder / "00001.tar")
    before = location.identity()
    assert before == {"path": location.url, **file_identity(location.path)}
    _tar(img2dataset_folder / "00001.tar", "other", "keys")
    assert "content" in identity_changes(before, location.identity())


def test_a_pipe_is_identified_by_its_command_and_says_it_cannot_be_checked(img2dataset_folder):
    [location] = list_locations(f"pipe:cat {img2dataset_folder}/00001.tar", allow_pipe=True)
    identity = location.identity()
    assert identity["command"] == f"cat {img2dataset_folder}/00001.tar"
    assert identity["checked_by"].startswith("nothing: a command's output cannot be checked")
    assert identity_changes(identity, {**identity, "command": "cat another.tar"}) == ["command"]


# --- What names shards ---


def test_names_shards_recognises_patterns_urls_and_pipes_but_not_a_jsonl_corpus(tmp_path, img2dataset_folder):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "data.jsonl").write_text("{}")
    assert names_shards(f"{img2dataset_folder}/{{00000..00011}}.tar")
    assert names_shards("s3://bucket/shards/{00000..00009}.tar") and names_shards("pipe:cat x.tar")
    assert names_shards(img2dataset_folder) and names_shards(str(img2dataset_folder / "*.tar"))
    assert not names_shards(tmp_path / "corpus") and not names_shards(str(tmp_path / "corpus" / "data.jsonl"))
