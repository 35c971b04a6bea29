"""Hand-assembled hostile pickles: calls to any (module, name), dotted names included, with nested calls as
arguments. Python's pickler refuses to write most of these, so the opcodes are written directly.

The named payloads below would each create a marker file if anything resolved them; the tests check that the
marker never appears."""

from __future__ import annotations

import pickle
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Call:
    """``module.name(*args)`` when unpickled; ``name`` may be dotted (protocol 4 resolves attributes)."""

    module: str
    name: str
    args: tuple = ()


@dataclass
class Ref:
    """The global ``module.name`` itself, not called."""

    module: str
    name: str


@dataclass
class Apply:
    """``fn(*args)`` when unpickled, where ``fn`` is itself a ``Call``'s result."""

    fn: Call
    args: tuple = ()


def _text(s: str) -> bytes:
    b = s.encode("utf-8")
    return pickle.BINUNICODE + struct.pack("<I", len(b)) + b


def _value(v, stack_global: bool = True) -> bytes:
    def value(x):
        return _value(x, stack_global)

    if isinstance(v, Call):
        return value(Ref(v.module, v.name)) + value(tuple(v.args)) + pickle.REDUCE
    if isinstance(v, Apply):
        return value(v.fn) + value(tuple(v.args)) + pickle.REDUCE
    if isinstance(v, Ref):
        if stack_global:
            return _text(v.module) + _text(v.name) + pickle.STACK_GLOBAL
        return pickle.GLOBAL + f"{v.module}\n{v.name}\n".encode()
    if v is None:
        return pickle.NONE
    if isinstance(v, str):
        return _text(v)
    if isinstance(v, bool):
        return pickle.NEWTRUE if v else pickle.NEWFALSE
    if isinstance(v, int):
        return pickle.BININT + struct.pack("<i", v)
    if isinstance(v, tuple):
        return pickle.MARK + b"".join(value(x) for x in v) + pickle.TUPLE
    if isinstance(v, list):
        return pickle.EMPTY_LIST + (
            pickle.MARK + b"".join(value(x) for x in v) + pickle.APPENDS if v else b""
        )
    if isinstance(v, dict):
        items = b"".join(value(k) + value(x) for k, x in v.items())
        return pickle.EMPTY_DICT + (pickle.MARK + items + pickle.SETITEMS if v else b"")
    raise TypeError(type(v))


def dumps(v, protocol: int = 4) -> bytes:
    """A pickle of ``v`` (``Call``/``Apply``/``Ref``/str/int/tuple/list/dict, nested); globals are written
    with STACK_GLOBAL for protocol 4, with GLOBAL (text ``module\\nname``) for protocol 2."""
    return pickle.PROTO + bytes([protocol]) + _value(v, stack_global=protocol >= 4) + pickle.STOP


def build(cls: Ref, state: dict) -> bytes:
    """A protocol 4 pickle of an instance of ``cls`` created with ``cls.__new__`` and given ``state``."""
    body = _value(cls) + pickle.EMPTY_TUPLE + pickle.NEWOBJ + _value(state) + pickle.BUILD
    return pickle.PROTO + b"\x04" + body + pickle.STOP


# --- Payloads that would create a marker file, and the check that none ran ---


def marker_payloads(marker: Path, evil_pickle: Path) -> dict[str, object]:
    """Pickled calls that would each create ``marker`` (or ``marker.npy``) if anything resolved them."""
    m = str(marker)
    touch = [sys.executable, "-c", f"open({m!r}, 'w').close()"]
    return {
        "dotted name through gensim.utils": Call("gensim.utils", "subprocess.check_call", (touch,)),
        "Popen through gensim.utils": Call("gensim.utils", "subprocess.Popen", (touch,)),
        "os.system": Call("os", "system", (f"touch {m}",)),
        "posix.system": Call("posix", "system", (f"touch {m}",)),
        "builtins.exec": Call("builtins", "exec", (f"open({m!r}, 'w').close()",)),
        "builtins.open": Call("builtins", "open", (m, "w")),
        "getattr of __import__": Apply(
            Call("builtins", "getattr", (Call("builtins", "__import__", ("os",)), "system")), (f"touch {m}",)
        ),
        "numpy reached through a gensim module": Call("gensim.models.keyedvectors", "np.save", (m, [1])),
        "gensim's own plain-pickle loader through an allowed class": Call(
            "gensim.models.keyedvectors", "KeyedVectors.load", (str(evil_pickle),)
        ),
        "an allowed function's globals": Call(
            "numpy._core.multiarray", "_reconstruct.__globals__.get", ("__builtins__",)
        ),
        "copyreg reconstructor": Call(
            "copyreg", "_reconstructor", (Ref("pathlib", "Path"), Ref("builtins", "object"), None)
        ),
        "subprocess directly": Call("subprocess", "check_call", (touch,)),
    }


def touch_marker_pickle(marker: Path, protocol: int = 4) -> bytes:
    """A plain pickle that runs ``touch marker`` when anything unpickles it."""
    return dumps(Call("os", "system", (f"touch {marker}",)), protocol=protocol)


def plant_marker(tmp_path: Path) -> tuple[Path, Path]:
    """The marker a payload would create, and a plain pickle beside it that would create it."""
    marker = tmp_path / "code-was-run"
    evil_pickle = tmp_path / "plain.pkl"
    evil_pickle.write_bytes(touch_marker_pickle(marker))
    return marker, evil_pickle


def assert_nothing_ran(marker: Path) -> None:
    time.sleep(0.2)  # a Popen child would have created it by now
    assert not any(marker.parent.glob(marker.name + "*")), "a payload ran"
