"""A corpus run's output folder: claimed for one run at a time, its settings recorded, written atomically.

``claimed_output`` holds a folder for a run: created if new, refused if it holds files of no run
(``claim_output_folder``: capeval never writes into, nor deletes from, a folder it did not make), locked against
other runs (``capeval.corpus.lock``), refused if it holds a symbolic link (``capeval.corpus.output_files``: nothing
is written through a link), its ``run.json`` written or checked (``check_manifest``: a rerun with other
settings or another source is refused instead of mixing two runs), a killed run's temporaries removed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from capeval.corpus.lock import LOCK_NAME, OutputLock
from capeval.corpus.output_files import refuse_links_below, write_atomically


def check_manifest(output: Path, manifest: dict) -> None:
    """Write ``run.json`` in a new output folder; in one that has it, refuse a run with other settings.

    Raises:
        ValueError: ``output`` holds a run whose manifest differs (the message names the keys that do), or a
            ``run.json`` that is not a JSON object.
    """
    path = output / "run.json"
    if path.is_file():
        try:
            previous = json.loads(path.read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            previous = err
        if not isinstance(previous, dict):
            problem = previous if isinstance(previous, Exception) else f"a JSON {type(previous).__name__}"
            raise ValueError(
                f"{path} is damaged (not the JSON object a run writes: {problem}): the settings of the run "
                f"{output} holds cannot be checked; choose another output folder, or empty this one to start afresh"
            )
        if previous != manifest:
            # in the manifest's own order: what a person changes (metrics, source) before what follows from it
            keys = list(manifest) + [k for k in previous if k not in manifest]
            changed = [k for k in keys if previous.get(k) != manifest.get(k)]
            shown = "; ".join(
                f"{k}: {previous.get(k)!r:.200} there, {manifest.get(k)!r:.200} now" for k in changed
            )
            raise ValueError(
                f"{output} holds a run with other settings ({shown}): resume it with the same source, metrics, "
                "model and options, or choose another output folder"
            )
        return
    write_atomically(path, lambda fh: fh.write(json.dumps(manifest, indent=2) + "\n"), inside=output)


def claim_output_folder(output: Path) -> None:
    """Refuse an output folder that holds files but no run (a mistyped ``--output`` pointing at a data folder).

    Raises:
        ValueError: the folder holds entries and no ``run.json``, naming a few of them.
    """
    if not output.is_dir() or (output / "run.json").exists():
        return
    entries = sorted(p.name for p in output.iterdir() if p.name != LOCK_NAME)
    if entries:
        shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
        raise ValueError(
            f"{output} is not a capeval output folder (it holds {shown} and no run.json): give a new or empty "
            "folder; capeval writes nothing into a folder it did not make"
        )


@contextmanager
def claimed_output(
    output: Path, manifest: dict[str, Any], remove_temporaries: Callable[[Path], None]
) -> Iterator[Path]:
    """Hold ``output`` for this run (see the module docstring); ``remove_temporaries`` clears a killed run's
    half-written files once the lock is held (no other run can be writing them).

    Yields:
        ``output``, locked until the ``with`` block ends (the OS releases the lock too if this process dies).
    """
    output.mkdir(parents=True, exist_ok=True)
    claim_output_folder(output)
    with OutputLock(output):
        refuse_links_below(output)
        check_manifest(output, manifest)
        remove_temporaries(output)
        yield output
