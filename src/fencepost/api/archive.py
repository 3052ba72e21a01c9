"""Safe extraction of an uploaded package archive (``.zip`` or ``.tar.gz``) into a private directory.

Refused with ``InvalidInput`` (nothing is written outside ``dest``): absolute member paths, ``..``,
backslashes or NUL in names, encrypted zip members, symbolic and hard links, devices and other special
members, more than ``max_members`` members, a member or a total larger than the limits (counted on the bytes actually
decompressed, not on sizes the archive declares), and anything that is not a zip or gzip'd tar.
"""

from __future__ import annotations

import gzip
import stat
import tarfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import IO

from fencepost.catalog.manifest import MANIFEST_NAME, MAX_FILES, MAX_PACKAGE_BYTES
from fencepost.core.errors import InvalidInput

MAX_MEMBERS = MAX_FILES * 2
MAX_EXTRACTED_BYTES = MAX_PACKAGE_BYTES
_CHUNK = 64 * 1024


def archive_format(filename: str, head: bytes) -> str:
    """``"zip"`` or ``"tar.gz"`` from the name and the first bytes (both must agree)."""
    name = filename.lower()
    if name.endswith(".zip"):
        if not head.startswith(b"PK\x03\x04") and not head.startswith(b"PK\x05\x06"):
            raise InvalidInput("the upload is named .zip but is not a zip archive")
        return "zip"
    if name.endswith((".tar.gz", ".tgz")):
        if not head.startswith(b"\x1f\x8b"):
            raise InvalidInput("the upload is named .tar.gz but is not gzip-compressed")
        return "tar.gz"
    raise InvalidInput("upload a .zip or .tar.gz archive of the package directory")


def _member_path(raw: str) -> PurePosixPath:
    if not raw or "\x00" in raw or "\\" in raw:
        raise InvalidInput(f"archive member {raw!r} has an invalid name")
    pure = PurePosixPath(raw)
    if pure.is_absolute() or raw.startswith("/"):
        raise InvalidInput(f"archive member {raw!r} has an absolute path")
    if ".." in pure.parts:
        raise InvalidInput(f"archive member {raw!r} leaves the archive ('..')")
    parts = [p for p in pure.parts if p not in ("", ".")]
    if not parts:
        raise InvalidInput(f"archive member {raw!r} has an empty name")
    return PurePosixPath(*parts)


class _Budget:
    def __init__(self, max_bytes: int, max_members: int) -> None:
        self.max_bytes = max_bytes
        self.max_members = max_members
        self.bytes = 0
        self.members = 0

    def member(self) -> None:
        self.members += 1
        if self.members > self.max_members:
            raise InvalidInput(f"the archive has more than {self.max_members} members")

    def add(self, n: int) -> None:
        self.bytes += n
        if self.bytes > self.max_bytes:
            raise InvalidInput(f"the archive expands to more than {self.max_bytes} bytes")


def _copy(source: IO[bytes], dest: Path, rel: PurePosixPath, budget: _Budget) -> None:
    target = dest.joinpath(*rel.parts)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        raise InvalidInput(f"archive member {str(rel)!r} appears twice")
    with open(target, "xb") as out:
        while chunk := source.read(_CHUNK):
            budget.add(len(chunk))
            out.write(chunk)


def _mkdir(dest: Path, rel: PurePosixPath) -> None:
    dest.joinpath(*rel.parts).mkdir(parents=True, exist_ok=True)


def _extract_zip(fileobj: IO[bytes], dest: Path, budget: _Budget) -> None:
    try:
        with zipfile.ZipFile(fileobj) as archive:
            for info in archive.infolist():
                budget.member()
                rel = _member_path(info.filename)
                kind = stat.S_IFMT(info.external_attr >> 16)  # 0 when the zip records no Unix mode
                if kind == stat.S_IFLNK:
                    raise InvalidInput(f"archive member {info.filename!r} is a symbolic link")
                if info.is_dir():
                    _mkdir(dest, rel)
                    continue
                if kind not in (0, stat.S_IFREG):
                    raise InvalidInput(f"archive member {info.filename!r} is not a regular file")
                if info.flag_bits & 0x1:  # general purpose bit 0: the member is encrypted (issue 11 item 8)
                    raise InvalidInput(f"archive member {info.filename!r} is encrypted: upload an archive "
                                       "without a password")
                with archive.open(info) as source:
                    _copy(source, dest, rel, budget)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError) as error:
        raise InvalidInput(f"the zip archive cannot be read: {error}") from None


def _extract_tar(fileobj: IO[bytes], dest: Path, budget: _Budget) -> None:
    try:
        with tarfile.open(fileobj=fileobj, mode="r|gz") as archive:
            for member in archive:
                budget.member()
                rel = _member_path(member.name)
                if member.issym() or member.islnk():
                    raise InvalidInput(f"archive member {member.name!r} is a link")
                if member.isdir():
                    _mkdir(dest, rel)
                    continue
                if not member.isreg():
                    raise InvalidInput(f"archive member {member.name!r} is not a regular file")
                if member.size > budget.max_bytes:
                    raise InvalidInput(f"the archive expands to more than {budget.max_bytes} bytes")
                source = archive.extractfile(member)
                if source is None:  # pragma: no cover - isreg() members always have data
                    raise InvalidInput(f"archive member {member.name!r} has no data")
                _copy(source, dest, rel, budget)
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise InvalidInput(f"the tar.gz archive cannot be read: {type(error).__name__}") from None


def extract_package(fileobj: IO[bytes], filename: str, dest: Path, *, max_bytes: int = MAX_EXTRACTED_BYTES,
                    max_members: int = MAX_MEMBERS) -> Path:
    """Extract the archive into the empty directory ``dest`` and return the package directory in it.

    The package is either at the archive's top level or in its single top-level folder.

    Raises:
        InvalidInput: unsafe or unreadable archive, or no ``fencepost-package.toml`` found.
    """
    head = fileobj.read(4)
    fileobj.seek(0)
    kind = archive_format(filename, head)
    budget = _Budget(max_bytes, max_members)
    try:
        if kind == "zip":
            _extract_zip(fileobj, dest, budget)
        else:
            _extract_tar(fileobj, dest, budget)
    except OSError as error:  # e.g. a member nested under a member that is a file
        raise InvalidInput(f"the archive cannot be extracted: {error.strerror or type(error).__name__}") from None
    if (dest / MANIFEST_NAME).is_file():
        return dest
    entries = [p for p in dest.iterdir() if not p.name.startswith(".") or p.name == MANIFEST_NAME]
    if len(entries) == 1 and entries[0].is_dir() and (entries[0] / MANIFEST_NAME).is_file():
        return entries[0]
    raise InvalidInput(f"no {MANIFEST_NAME} at the top of the archive or in its single top-level folder")
