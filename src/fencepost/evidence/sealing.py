"""Seal keys: the HMAC-SHA-256 keys that seal Receipt evidence, kept outside the control database (ADR 0064).

A fingerprint is a plain SHA-256: anyone who can edit a Receipt can recompute it. A seal is an HMAC under a key
the control database does not hold, so an edit made with database access alone no longer verifies. Several keys
may be held at once, each with an id; new seals use the *active* key and name its id, older seals keep verifying
under the key their id names (rotation).

Where the keys come from, first match wins:

1. ``FENCEPOST_SEAL_KEYS``: ``ID=HEX[,ID=HEX...]``, each secret at least 32 hex digits (16 bytes); the first is
   active. Nothing is written to disk.
2. ``FENCEPOST_SEAL_KEY_FILE``: a key file at that path.
3. The default key file ``$XDG_CONFIG_HOME/fencepost/seal-keys.json`` (``~/.config/fencepost/seal-keys.json``).

A key file that does not exist is created on first use, mode 0600, with one random 32-byte key. Its format is
JSON: ``{"active": "<id>", "keys": {"<id>": "<hex>", ...}}``.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fencepost.core.errors import InvalidInput

ENV_KEYS = "FENCEPOST_SEAL_KEYS"
ENV_KEY_FILE = "FENCEPOST_SEAL_KEY_FILE"
SEAL_ALGORITHM = "hmac-sha256"
SEAL_DOMAIN = b"fencepost:receipt-seal/v1\x00"
MIN_KEY_BYTES = 16
log = logging.getLogger("fencepost.evidence")
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def default_key_file(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/fencepost/seal-keys.json``, or ``~/.config/fencepost/seal-keys.json``."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "fencepost" / "seal-keys.json"


def _check_id(key_id: str) -> str:
    if not key_id or len(key_id) > 64 or not set(key_id) <= _ID_CHARS:
        raise InvalidInput(f"a seal key id is 1-64 letters, digits, '-', '_' or '.', not {key_id!r}")
    return key_id


def _secret(key_id: str, text: str, where: str) -> bytes:
    try:
        value = bytes.fromhex(text)
    except ValueError:
        raise InvalidInput(f"seal key {key_id!r} in {where} is not hexadecimal") from None
    if len(value) < MIN_KEY_BYTES:
        raise InvalidInput(f"seal key {key_id!r} in {where} is shorter than {MIN_KEY_BYTES} bytes")
    return value


@dataclass(frozen=True)
class SealKeys:
    """The keys that seal and verify Receipt evidence.

    Attributes:
        active: the id of the key new seals use.
        keys: key id -> secret bytes (never shown in ``repr``).
        source: where they were read from (a path, or the variable's name), for messages.
    """

    active: str
    keys: Mapping[str, bytes] = field(repr=False)
    source: str = ""

    def __post_init__(self) -> None:
        if self.active not in self.keys:
            raise InvalidInput(f"the active seal key {self.active!r} is not among the keys of {self.source}")

    def mac(self, key_id: str, fingerprint: str) -> str | None:
        """HMAC-SHA-256 (hex) of ``fingerprint`` under key ``key_id`` in the seal domain; None: no such key."""
        secret = self.keys.get(key_id)
        if secret is None:
            return None
        return hmac.new(secret, SEAL_DOMAIN + fingerprint.encode("ascii", "replace"), hashlib.sha256).hexdigest()

    def seal(self, fingerprint: str) -> dict[str, str]:
        """The seal of evidence whose unsealed fingerprint is ``fingerprint``: ``{"alg", "key_id", "mac"}``."""
        mac = self.mac(self.active, fingerprint)
        assert mac is not None  # __post_init__: the active key exists
        return {"alg": SEAL_ALGORITHM, "key_id": self.active, "mac": mac}

    def matches(self, key_id: str, fingerprint: str, mac: str) -> bool | None:
        """Whether ``mac`` seals ``fingerprint`` under ``key_id`` (constant time); None when the key is unknown."""
        wanted = self.mac(key_id, fingerprint)
        if wanted is None:
            return None
        return hmac.compare_digest(wanted.encode(), mac.encode("utf-8", "replace"))

    @staticmethod
    def from_text(text: str, source: str = ENV_KEYS) -> SealKeys:
        """``ID=HEX[,ID=HEX...]`` (the first is active).

        Raises:
            InvalidInput: an empty list, a malformed entry, a repeated id or a secret under 16 bytes.
        """
        keys: dict[str, bytes] = {}
        order: list[str] = []
        for part in (p.strip() for p in text.split(",")):
            key_id, sep, hex_text = part.partition("=")
            if not sep:
                raise InvalidInput(f"{source} takes ID=HEX[,ID=HEX...]; an entry has no '='")
            key_id = _check_id(key_id.strip())
            if key_id in keys:
                raise InvalidInput(f"seal key {key_id!r} appears twice in {source}")
            keys[key_id] = _secret(key_id, hex_text.strip(), source)
            order.append(key_id)
        return SealKeys(order[0], keys, source)

    @staticmethod
    def from_file(path: Path, *, create: bool = True) -> SealKeys:
        """The keys of key file ``path``; created (mode 0600, one random key) when missing and ``create``.

        Creation is atomic: the file is written under a private name and linked into place, so two processes
        starting at once end up with the same key and no reader sees a half-written file.

        Raises:
            InvalidInput: the file cannot be read or created, is not a key file, or is readable by others.
        """
        if not path.exists() and create:
            _create_key_file(path)
        try:
            raw_bytes = path.read_bytes()
            mode = path.stat().st_mode
        except OSError as error:
            raise InvalidInput(f"the seal key file {str(path)!r} cannot be read ({error.strerror or error})") from None
        try:
            raw = raw_bytes.decode("utf-8")
        except UnicodeDecodeError:
            raw = ""  # not text at all: refused below as not a key file (after the mode check)
        if mode & 0o077:
            raise InvalidInput(f"the seal key file {str(path)!r} is readable by other users (mode "
                               f"{mode & 0o777:o}); make it 0600: chmod 600 {path}")
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            data = None
        if not isinstance(data, dict) or not isinstance(data.get("keys"), dict) or not data["keys"] \
                or not isinstance(data.get("active"), str):
            raise InvalidInput(f"{str(path)!r} is not a seal key file "
                               '({"active": "<id>", "keys": {"<id>": "<hex>"}})')
        keys = {_check_id(str(k)): _secret(str(k), str(v), str(path)) for k, v in data["keys"].items()}
        return SealKeys(data["active"], keys, str(path))


def new_key_id() -> str:
    """A fresh key id: ``k`` + 8 random hex digits."""
    return "k" + secrets.token_hex(4)


#: Key files this process created (absolute paths): what ``created_here`` answers.
_created: set[str] = set()


def _create_key_file(path: Path) -> None:
    key_id = new_key_id()
    body = json.dumps({"active": key_id, "keys": {key_id: secrets.token_hex(32)}}, indent=2) + "\n"
    if write_key_file(path, body, replace=False):
        _created.add(str(path.absolute()))
        # INFO: a first `fencepost rehearse` on one machine is the common case, not a fault; a worker logs it.
        log.info("created a new seal key file: every process that seals or verifies Receipts on this control "
                 "database needs the same keys (docs/operations.md, Sealed evidence and its keys)",
                 extra={"event": "seal_key_file_created", "path": str(path), "key_id": key_id})


#: A key file younger than this (seconds) was made by a process starting now, not configured by an operator.
JUST_CREATED_SECONDS = 60.0


def created_here(keys: SealKeys) -> bool:
    """Whether ``keys`` come from a key file this process created (it had none: a new random key)."""
    return str(Path(keys.source).absolute()) in _created if keys.source != ENV_KEYS else False


def just_created(keys: SealKeys, *, now: float | None = None) -> bool:
    """Whether ``keys`` come from a key file made in the last ``JUST_CREATED_SECONDS``: by this process, or by one
    starting beside it (processes started together on a machine with no key file: only one creates it, the
    others read it). A variable's keys are configured, never just created."""
    if keys.source == ENV_KEYS:
        return False
    if created_here(keys):
        return True
    try:
        modified = Path(keys.source).stat().st_mtime
    except OSError:  # removed meanwhile by its creator, refused: so was this one's key
        return True
    return (time.time() if now is None else now) - modified < JUST_CREATED_SECONDS


def remove_created(keys: SealKeys) -> bool:
    """Delete the key file of ``keys`` if this process created it (before it sealed anything with it): the next
    start then finds no file rather than a key nobody else has. Returns whether a file was removed."""
    if not created_here(keys):
        return False
    path = Path(keys.source)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    _created.discard(str(path.absolute()))
    return True


def write_key_file(path: Path, body: str, *, replace: bool) -> bool:
    """Write ``body`` as key file ``path`` (mode 0600, its directory 0700 when created), atomically.

    Args:
        replace: overwrite an existing file (rotation); when False an existing file is left as it is.
    Returns:
        Whether ``body`` was written (False: ``replace`` is False and another process created the file first).
    Raises:
        InvalidInput: the directory or file cannot be written.
    """
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(body)
                out.flush()
                os.fsync(out.fileno())
            written = True
            if replace:
                os.replace(temporary, path)
            else:
                try:
                    os.link(temporary, path)
                except FileExistsError:  # another process created it first: use theirs
                    written = False
        finally:
            if temporary.exists():
                temporary.unlink()
        return written
    except OSError as error:
        raise InvalidInput(f"the seal key file {str(path)!r} cannot be created "
                           f"({error.strerror or error}); set {ENV_KEY_FILE} to a writable path") from None


_cache: dict[tuple[object, ...], SealKeys] = {}
_cache_lock = threading.Lock()


def load_seal_keys(env: Mapping[str, str] | None = None, *, create: bool = True) -> SealKeys:
    """The seal keys this process is configured with (see the module docstring for where they come from).

    Args:
        env: the environment (``os.environ`` when None).
        create: create a missing key file (False for a read that must not invent a key).
    Returns:
        The keys; a file's are cached until it changes (mtime, size).
    Raises:
        InvalidInput: the variable or the file is not usable (the message says why).
    """
    env = os.environ if env is None else env
    text = env.get(ENV_KEYS, "").strip()
    if text:
        cache_key: tuple[object, ...] = ("env", text)
        with _cache_lock:
            found = _cache.get(cache_key)
        if found is None:
            found = SealKeys.from_text(text)
        with _cache_lock:
            _cache[cache_key] = found
        return found
    path = Path(env[ENV_KEY_FILE]) if env.get(ENV_KEY_FILE) else default_key_file(env)
    if not path.exists() and create:
        _create_key_file(path)
    try:
        info = path.stat()
        cache_key = ("file", str(path), info.st_mtime_ns, info.st_size, info.st_mode)
    except OSError:
        cache_key = ("file", str(path))
    with _cache_lock:
        found = _cache.get(cache_key)
    if found is None:
        found = SealKeys.from_file(path, create=create)
        with _cache_lock:
            _cache[cache_key] = found
    return found


def rotate_key_file(path: Path) -> tuple[str, str]:
    """Add a new random key to key file ``path`` and make it active; the old keys stay for verification.

    Returns:
        ``(old_active_id, new_active_id)``.
    Raises:
        InvalidInput: the file is not a usable key file or cannot be written.
    """
    current = SealKeys.from_file(path, create=True)
    key_id = new_key_id()
    keys = {k: v.hex() for k, v in current.keys.items()}
    keys[key_id] = secrets.token_hex(32)
    write_key_file(path, json.dumps({"active": key_id, "keys": keys}, indent=2) + "\n", replace=True)
    return current.active, key_id
