"""``fencepost seal-keys``: where the keys that seal Receipt evidence are, and rotating them (ADR 0064)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from fencepost.cli.common import JsonOpt, emit, fail, handled
from fencepost.core.errors import InvalidInput
from fencepost.evidence.sealing import ENV_KEY_FILE, ENV_KEYS, default_key_file, load_seal_keys, rotate_key_file

app = typer.Typer(help="The keys that seal Receipt evidence, kept outside the control database.",
                  no_args_is_help=True)


def _key_file() -> Path:
    return Path(os.environ[ENV_KEY_FILE]) if os.environ.get(ENV_KEY_FILE) else default_key_file()


@app.command()
def show(json: JsonOpt = False) -> None:
    """Print where the seal keys come from, the active key id and every key id (never a secret). It only reads:
    when the key file does not exist yet it says so and creates nothing (a worker creates it on first use)."""
    path = None if os.environ.get(ENV_KEYS, "").strip() else _key_file()
    if path is not None and not path.exists():
        emit(json, {"source": str(path), "exists": False, "active": None, "key_ids": []},
             lambda: typer.echo(f"seal keys: {path} (does not exist yet: a worker creates it on first use, "
                                "or `fencepost seal-keys rotate` does now)"))
        return
    with handled():
        keys = load_seal_keys(create=False)
    data = {"source": keys.source, "exists": True, "active": keys.active, "key_ids": sorted(keys.keys)}
    emit(json, data, lambda: typer.echo(f"seal keys: {keys.source}\nactive: {keys.active}\n"
                                        f"keys: {', '.join(sorted(keys.keys))}"))


@app.command()
def rotate(json: JsonOpt = False) -> None:
    """Add a new random key to the key file and make it the active one. New Receipts are sealed with it; the old
    keys stay in the file, so Receipts sealed with them keep verifying. Keys given in FENCEPOST_SEAL_KEYS are
    rotated by editing the variable instead (put the new ID=HEX first)."""
    if os.environ.get(ENV_KEYS, "").strip():
        fail(InvalidInput(f"the seal keys come from {ENV_KEYS}: rotate by putting a new ID=HEX first in it"))
    path = _key_file()
    with handled():
        old, new = rotate_key_file(path)
    emit(json, {"source": str(path), "previous": old, "active": new},
         lambda: typer.echo(f"{path}: active seal key is now {new} ({old} kept for verification)"))
