"""Reading and writing the text files every part uses, with one-line errors.

``read_text`` turns OS and decoding errors into an :class:`InputError` naming the file; ``check_output_path``
refuses an output path that is a folder or whose folder does not exist; ``atomic_write_text`` writes through a
temporary file and a rename, so a reader never sees a half-written file.
"""
from __future__ import annotations

from pathlib import Path

from planner.errors import InputError


def read_text(path: str | Path) -> str:
    """Read a text file, turning OS errors into one-line :class:`InputError`."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("file not found", source=str(path)) from None
    except IsADirectoryError:
        raise InputError("is a directory, expected a file", source=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read ({exc})", source=str(path)) from None


def check_output_path(path: str | Path, flag: str = "-o") -> Path:
    """``path`` if a file can be written there: its folder exists and it is not itself a folder."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{flag} {p}: is a folder, expected a file name")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"{flag} {p}: folder {parent} does not exist")
    return p


def atomic_write_text(path: Path, text: str, flag: str = "-o") -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (never a half-written file, and no
    temporary file left behind when the write fails)."""
    check_output_path(path, flag)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(f"{flag} {path}: cannot write ({type(exc).__name__}: {exc.strerror or exc})") from None
