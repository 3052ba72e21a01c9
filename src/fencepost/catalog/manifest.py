"""The plugin package format: a directory with ``fencepost-package.toml`` and SQL files.

Format (documented for users in docs/package-format.md)::

    [package]
    name = "inventory"                 # [a-z0-9][a-z0-9._-]*, at most 100 chars
    version = "1.1.0"                  # at most 64 chars
    previous_version = "1.0.0"         # optional: the version this one upgrades from
    previous_through = "0002_price"    # required with previous_version: its last migration id
    migrations_dir = "migrations"      # default; or list [[migrations]] explicitly instead
    seed = ["seed/items.sql"]          # optional seed data, applied in order
    uninstall = "sql/drop.sql"         # optional; otherwise the down migrations, newest first, as far as they go

    [[migrations]]                     # explicit form (replaces discovery in migrations_dir)
    id = "0001_init"
    up = "sql/init.sql"
    down = "sql/init.down.sql"         # optional

    [sqlite]
    functions = { BIN2B64 = "base64_encode" }   # host functions registered in the sandbox (ADR 0063)

    [verify]
    volatile_columns = ["last_update"]           # columns left out of seeded content digests

    [[tasks]]                          # tasks a workflow step can run; the source digest is recorded
    id = "refresh_stock"
    source = "tasks/refresh_stock.sql"

    [[workflows]]                      # a DAG of at most 128 steps (ADR-0224)
    id = "nightly"
    steps = [{ key = "refresh", task = "refresh_stock" },
             { key = "report", task = "stock_report", needs = ["refresh"] }]

Discovery in ``migrations_dir`` accepts ``<id>.up.sql`` (+ ``<id>.down.sql``) files and ``<id>/up.sql``
(+ ``down.sql``) folders, ordered by id (byte order); a down file pairs by name, else by numeric version
(``PAIRING_RULES``, ADR 0062). Paths are relative to the package directory; ``..``,
absolute paths and symlinks leaving the package are refused. A frozen package lives in the control
database (every file's bytes), so later edits on disk never change what an Attempt executes.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from fencepost.catalog.definitions import check_id, normalize_dag, workflow_digest
from fencepost.core.errors import InvalidInput, InvalidPlan
from fencepost.core.fingerprint import fingerprint, sha256_bytes
from fencepost.store.records import RunFile

MANIFEST_NAME = "fencepost-package.toml"
MAX_PACKAGE_BYTES = 64 * 1024 * 1024
MAX_FILES = 2000
MAX_MANIFEST_BYTES = 1024 * 1024
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
_VERSION_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}$")
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_SQL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_IMPLEMENTATION_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,99}$")
#: SQLite functions that fencepost's own checks call on the package's connection (``NOT LIKE 'sqlite_%'`` and
#: ``coalesce(sql, '')`` reading ``sqlite_master``, ``count(*)``): a host function registered under one of these
#: names replaces SQLite's on that connection, and one taking two arguments as ``like`` hid every object from
#: the schema checks, the content digests and the uninstall's emptiness check (ADR 0063).
RESERVED_SQL_FUNCTIONS = frozenset({"like", "coalesce", "count"})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class MigrationEntry(_Strict):
    id: str
    up: str
    down: str | None = None

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not _ID_RE.fullmatch(v):
            raise ValueError("migration id must be 1-200 chars of letters, digits, '.', '_' or '-'")
        return v


class PackageSection(_Strict):
    name: str
    version: str
    previous_version: str | None = None
    previous_through: str | None = None
    migrations_dir: str | None = None
    seed: list[str] = Field(default_factory=list)
    uninstall: str | None = None
    description: str | None = Field(default=None, max_length=500)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.fullmatch(v):
            raise ValueError("name must match [a-z0-9][a-z0-9._-]* (at most 100 chars)")
        return v

    @field_validator("version", "previous_version")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        if v is not None and not _VERSION_RE.fullmatch(v):
            raise ValueError("version must be 1-64 chars of letters, digits, '.', '+', '_' or '-'")
        return v

    @model_validator(mode="after")
    def _previous(self) -> PackageSection:
        if (self.previous_version is None) != (self.previous_through is None):
            raise ValueError("previous_version and previous_through go together")
        if self.previous_version is not None and self.previous_version == self.version:
            raise ValueError("previous_version must differ from version")
        return self


class SqliteSection(_Strict):
    functions: dict[str, str] = Field(default_factory=dict)

    @field_validator("functions")
    @classmethod
    def _functions(cls, v: dict[str, str]) -> dict[str, str]:
        # Whether an implementation is available is the host's to say, at ``rehearsal create`` (ADR 0063).
        for name, implementation in v.items():
            if not _SQL_NAME_RE.fullmatch(name):
                raise ValueError(f"{name!r} is not a valid SQL function name")
            if name.lower() in RESERVED_SQL_FUNCTIONS:
                raise ValueError(f"SQL function {name!r} cannot be replaced by a host function: fencepost's own "
                                 "checks call SQLite's in the sandbox")
            if not _IMPLEMENTATION_RE.fullmatch(implementation):
                raise ValueError(f"{implementation!r} is not a valid host function name (letters, digits, '_', "
                                 "'.' or '-', at most 100 characters)")
        return v


class VerifySection(_Strict):
    volatile_columns: list[str] = Field(default_factory=list)


class TaskEntry(_Strict):
    id: str
    source: str
    #: seconds a workflow step running this task may take from its start barrier (ADR 0074); default 300
    timeout_seconds: int | None = Field(default=None, ge=1, le=86400)


class WorkflowStepEntry(_Strict):
    key: str
    task: str
    needs: list[str] = Field(default_factory=list)


class WorkflowEntry(_Strict):
    id: str
    steps: list[WorkflowStepEntry]


class ManifestModel(_Strict):
    package: PackageSection
    migrations: list[MigrationEntry] | None = None
    sqlite: SqliteSection = Field(default_factory=SqliteSection)
    verify: VerifySection = Field(default_factory=VerifySection)
    tasks: list[TaskEntry] = Field(default_factory=list)
    workflows: list[WorkflowEntry] = Field(default_factory=list)


@dataclass(frozen=True)
class TaskDef:
    id: str
    source: str        # package-relative path
    digest: str        # sha256 of the source bytes
    timeout_seconds: int | None = None   # declared deadline of a step running it (None: the default)

    def as_json(self) -> dict[str, Any]:
        """The task as the normalized manifest lists it (``timeout_seconds`` only when declared, so the content
        digest of a package that declares none is what it always was)."""
        return {"id": self.id, "source": self.source, "digest": self.digest,
                **({} if self.timeout_seconds is None else {"timeout_seconds": self.timeout_seconds})}


@dataclass(frozen=True)
class WorkflowDef:
    id: str
    steps: tuple[dict[str, Any], ...]   # normalized: [{"key", "task", "needs"}] sorted by key
    digest: str


@dataclass(frozen=True)
class Migration:
    id: str
    up: str            # package-relative path
    down: str | None


@dataclass(frozen=True)
class PackageSpec:
    """A validated package: normalized manifest plus file bytes, and its content digest."""

    name: str
    version: str
    previous_version: str | None
    previous_through: str | None
    migrations: tuple[Migration, ...]
    seed: tuple[str, ...]
    uninstall: str | None
    functions: dict[str, str]
    volatile_columns: tuple[str, ...]
    files: dict[str, bytes]
    tasks: tuple[TaskDef, ...] = ()
    workflows: tuple[WorkflowDef, ...] = ()
    #: migration id -> the rule that paired its down file (``PAIRING_RULES``); migrations without a down are
    #: absent. Only ``"version"`` is part of the normalized manifest (the other rules show in the file names,
    #: so the content digest of a package paired by name is what it always was).
    pairing: dict[str, str] = dataclass_field(default_factory=dict)

    @property
    def pairings(self) -> dict[str, str]:
        """The migrations whose down was paired by numeric version (id -> ``"version"``)."""
        return {mid: rule for mid, rule in self.pairing.items() if rule == "version"}

    def normalized_manifest(self) -> dict[str, Any]:
        """The manifest as plain JSON, with discovery resolved (what a Run freezes)."""
        return {
            "format": 1, "name": self.name, "version": self.version,
            "previous_version": self.previous_version, "previous_through": self.previous_through,
            "migrations": [{"id": m.id, "up": m.up, "down": m.down,
                            **({"pairing": "version"} if self.pairing.get(m.id) == "version" else {})}
                           for m in self.migrations],
            "seed": list(self.seed), "uninstall": self.uninstall, "functions": dict(sorted(self.functions.items())),
            "volatile_columns": list(self.volatile_columns),
            "tasks": [t.as_json() for t in self.tasks],
            "workflows": [{"id": w.id, "digest": w.digest, "steps": list(w.steps)} for w in self.workflows],
        }

    @property
    def content_digest(self) -> str:
        """SHA-256 over the normalized manifest and every file's path and digest."""
        listing = [{"path": p, "sha256": sha256_bytes(b)} for p, b in sorted(self.files.items())]
        return fingerprint("package-content/v1", {"manifest": self.normalized_manifest(), "files": listing})

    def run_files(self) -> list[RunFile]:
        return [RunFile(path=p, sha256=sha256_bytes(b), size=len(b), content=b) for p, b in sorted(self.files.items())]

    def sql(self, path: str) -> str:
        return self.files[path].decode("utf-8")

    @property
    def uninstall_method(self) -> str | None:
        """``"uninstall_script"``, ``"down_migrations"`` when every migration has a down, else None.

        The uninstall scenario runs whatever downs exist even when this is None (ADR 0062).
        """
        if self.uninstall is not None:
            return "uninstall_script"
        if self.migrations and all(m.down is not None for m in self.migrations):
            return "down_migrations"
        return None

    def through_index(self) -> int | None:
        """Number of migrations the previous version shipped, or None without a previous version."""
        if self.previous_through is None:
            return None
        return [m.id for m in self.migrations].index(self.previous_through) + 1


def _safe_relative(raw: str, what: str) -> str:
    if not raw or "\\" in raw or "\x00" in raw:
        raise InvalidInput(f"{what}: {raw!r} is not a valid relative path")
    pure = PurePosixPath(raw)
    if pure.is_absolute() or ".." in pure.parts:
        raise InvalidInput(f"{what}: {raw!r} must be a path inside the package (no '..', not absolute)")
    return str(pure)


def _read(root: Path, rel: str, what: str, files: dict[str, bytes]) -> None:
    path = (root / rel)
    try:
        resolved = path.resolve(strict=True)
    except (FileNotFoundError, RuntimeError):
        raise InvalidInput(f"{what}: file {rel!r} does not exist in the package") from None
    if root.resolve() not in resolved.parents:
        raise InvalidInput(f"{what}: {rel!r} leaves the package directory")
    if not resolved.is_file():
        raise InvalidInput(f"{what}: {rel!r} is not a file")
    # Refuse oversize input before reading it: a huge (or sparse) file must not exhaust memory.
    size = resolved.stat().st_size
    if size + sum(len(b) for b in files.values()) > MAX_PACKAGE_BYTES:
        raise InvalidInput(f"{what}: {rel!r} would make the package larger than {MAX_PACKAGE_BYTES} bytes")
    data = resolved.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{what}: {rel!r} is not UTF-8 text") from None
    nul = data.find(b"\x00")
    if nul >= 0:  # SQLite takes SQL as a C string: it would be cut there, or refused later (issue 11 item 8)
        raise InvalidInput(f"{what}: {rel!r} contains a NUL byte at offset {nul}; SQL text cannot hold one")
    files[rel] = data


_VERSION_PREFIX_RE = re.compile(r"^[A-Za-z]?([0-9]+)")

#: How a migration's down file was paired with its up file (issue 11 item 3, ADR 0062).
PAIRING_RULES = ("manifest", "folder", "name", "version")


def numeric_version(stem: str) -> int | None:
    """The numeric version a migration file name starts with (``0003_x`` -> 3, ``V0012.Name`` -> 12), or None."""
    found = _VERSION_PREFIX_RE.match(stem)
    return int(found.group(1)) if found else None


def _discover(root: Path, directory: str) -> tuple[list[MigrationEntry], dict[str, str]]:
    base = root / directory
    if not base.is_dir():
        raise InvalidInput(f"migrations_dir {directory!r} is not a directory in the package")
    entries: dict[str, dict[str, str]] = {}
    rules: dict[str, str] = {}
    downs: dict[str, str] = {}
    for child in sorted(base.iterdir(), key=lambda p: p.name.encode()):
        rel = f"{directory}/{child.name}"
        if child.is_dir():
            if (child / "up.sql").is_file():
                entries[child.name] = {"up": f"{rel}/up.sql"}
                if (child / "down.sql").is_file():
                    entries[child.name]["down"] = f"{rel}/down.sql"
                    rules[child.name] = "folder"
        elif child.name.endswith(".up.sql"):
            entries.setdefault(child.name[: -len(".up.sql")], {})["up"] = rel
        elif child.name.endswith(".down.sql"):
            downs[child.name[: -len(".down.sql")]] = rel
    # Rule "name": the down's stem is the up's. Rule "version": otherwise, the only unpaired up and the only
    # unpaired down with the same numeric version (a tool's odd name, e.g. a double dot before "up.sql").
    unpaired: dict[str, str] = {}
    for stem, rel in downs.items():
        if stem in entries and "up" in entries[stem] and "down" not in entries[stem]:
            entries[stem]["down"] = rel
            rules[stem] = "name"
        else:
            unpaired[stem] = rel
    for stem, rel in sorted(unpaired.items()):
        version = numeric_version(stem)
        ups = [mid for mid, paths in entries.items()
               if "down" not in paths and version is not None and numeric_version(mid) == version]
        others = [d for d in unpaired if numeric_version(d) == version]
        if version is None or len(ups) != 1 or len(others) != 1:
            raise InvalidInput(f"migration {stem!r} has a down file ({rel}) but no up file with the same name or "
                               "the same numeric version")
        entries[ups[0]]["down"] = rel
        rules[ups[0]] = "version"
    result = []
    for mid in sorted(entries, key=lambda s: s.encode()):
        paths = entries[mid]
        result.append(MigrationEntry(id=mid, up=paths["up"], down=paths.get("down")))
    if not result:
        raise InvalidInput(f"no migrations found in {directory!r} (expected <id>.up.sql files or <id>/up.sql)")
    return result, rules


def _manifest_error(error: ValidationError) -> str:
    """The first validation error as ``<location>: <message>`` in our words, not pydantic's: a validator's own
    message without pydantic's "Value error, " prefix, and "unknown key" for a key the format does not have."""
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "manifest"
    message = str(first["msg"])
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    elif first["type"] == "value_error":
        cause = (first.get("ctx") or {}).get("error")
        message = str(cause) if cause is not None else message.removeprefix("Value error, ")
    return f"{where}: {message}"


def load_package(directory: str | Path) -> PackageSpec:
    """Read and strictly validate a package directory.

    Args:
        directory: path of the package directory (holding ``fencepost-package.toml``).
    Returns:
        A ``PackageSpec`` with every referenced file's bytes.
    Raises:
        InvalidInput: with one line naming the first problem (missing manifest, TOML syntax, unknown or
            missing key, bad path, missing file, non-UTF-8 SQL, duplicate migration id, size limits).
    """
    root = Path(directory)
    if not root.is_dir():
        what = "is a file, not a directory" if root.exists() else "does not exist"
        raise InvalidInput(f"package directory {str(directory)!r} {what}")
    manifest_path = root / MANIFEST_NAME
    if not manifest_path.is_file():
        raise InvalidInput(f"no {MANIFEST_NAME} in the package directory")
    if root.resolve() not in manifest_path.resolve().parents:
        raise InvalidInput(f"{MANIFEST_NAME} is a link leaving the package directory")
    if manifest_path.stat().st_size > MAX_MANIFEST_BYTES:
        raise InvalidInput(f"{MANIFEST_NAME} is larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        raw = tomllib.loads(manifest_path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise InvalidInput(f"{MANIFEST_NAME} is not valid TOML: {error}") from None
    except RecursionError:
        raise InvalidInput(f"{MANIFEST_NAME} nests too deeply") from None
    try:
        model = ManifestModel.model_validate(raw)
    except ValidationError as error:
        raise InvalidInput(f"{MANIFEST_NAME}: {_manifest_error(error)}") from None

    pkg = model.package
    if model.migrations is not None and pkg.migrations_dir is not None:
        raise InvalidInput(f"{MANIFEST_NAME}: give either [[migrations]] or package.migrations_dir, not both")
    if model.migrations is not None:
        entries = list(model.migrations)
        rules = {m.id: "manifest" for m in entries if m.down is not None}
    else:
        entries, rules = _discover(root, _safe_relative(pkg.migrations_dir or "migrations", "migrations_dir"))
    if not entries:
        raise InvalidInput(f"{MANIFEST_NAME}: a package needs at least one migration")

    files: dict[str, bytes] = {MANIFEST_NAME: manifest_path.read_bytes()}
    migrations = []
    seen: set[str] = set()
    for entry in entries:
        if entry.id in seen:
            raise InvalidInput(f"{MANIFEST_NAME}: duplicate migration id {entry.id!r}")
        seen.add(entry.id)
        up = _safe_relative(entry.up, f"migration {entry.id}")
        _read(root, up, f"migration {entry.id}", files)
        down = None
        if entry.down is not None:
            down = _safe_relative(entry.down, f"migration {entry.id}")
            _read(root, down, f"migration {entry.id}", files)
        migrations.append(Migration(entry.id, up, down))
    seed = []
    for item in pkg.seed:
        rel = _safe_relative(item, "seed")
        _read(root, rel, "seed", files)
        seed.append(rel)
    uninstall = None
    if pkg.uninstall is not None:
        uninstall = _safe_relative(pkg.uninstall, "uninstall")
        _read(root, uninstall, "uninstall", files)
    tasks, workflows = _definitions(root, model, files)
    if pkg.previous_through is not None and pkg.previous_through not in seen:
        raise InvalidInput(f"{MANIFEST_NAME}: previous_through {pkg.previous_through!r} is not a migration id")
    if len(files) > MAX_FILES:
        raise InvalidInput(f"package has {len(files)} files; the limit is {MAX_FILES}")
    total = sum(len(b) for b in files.values())
    if total > MAX_PACKAGE_BYTES:
        raise InvalidInput(f"package is {total} bytes; the limit is {MAX_PACKAGE_BYTES}")
    return PackageSpec(
        name=pkg.name, version=pkg.version, previous_version=pkg.previous_version,
        previous_through=pkg.previous_through, migrations=tuple(migrations), seed=tuple(seed), uninstall=uninstall,
        functions=dict(model.sqlite.functions), volatile_columns=tuple(model.verify.volatile_columns), files=files,
        tasks=tasks, workflows=workflows, pairing=rules)


def _definitions(root: Path, model: ManifestModel,
                 files: dict[str, bytes]) -> tuple[tuple[TaskDef, ...], tuple[WorkflowDef, ...]]:
    tasks: dict[str, TaskDef] = {}
    try:
        for task in model.tasks:
            check_id(task.id, "task id")
            if task.id in tasks:
                raise InvalidInput(f"{MANIFEST_NAME}: duplicate task id {task.id!r}")
            source = _safe_relative(task.source, f"task {task.id}")
            _read(root, source, f"task {task.id}", files)
            tasks[task.id] = TaskDef(task.id, source, sha256_bytes(files[source]), task.timeout_seconds)
        workflows: dict[str, WorkflowDef] = {}
        for wf in model.workflows:
            check_id(wf.id, "workflow id")
            if wf.id in workflows:
                raise InvalidInput(f"{MANIFEST_NAME}: duplicate workflow id {wf.id!r}")
            steps = normalize_dag([s.model_dump() for s in wf.steps], what=f"workflow {wf.id}")
            for step in steps:
                if step["task"] not in tasks:
                    raise InvalidInput(f"{MANIFEST_NAME}: workflow {wf.id} step {step['key']!r} names unknown "
                                       f"task {step['task']!r}")
            workflows[wf.id] = WorkflowDef(wf.id, tuple(steps), workflow_digest(wf.id, steps))
    except InvalidPlan as error:
        raise InvalidInput(f"{MANIFEST_NAME}: {error}") from None
    return tuple(tasks.values()), tuple(workflows.values())


def package_from_run(manifest: dict[str, Any], files: list[RunFile]) -> PackageSpec:
    """Rebuild the frozen ``PackageSpec`` from a Run's stored manifest and file bytes (never the disk).

    Raises:
        IntegrityViolation-like ``ValueError``: a stored file's bytes do not match its recorded digest.
    """
    blobs = {}
    for f in files:
        if sha256_bytes(f.content) != f.sha256:
            raise ValueError(f"frozen file {f.path!r} does not match its recorded digest")
        blobs[f.path] = f.content
    return PackageSpec(
        name=manifest["name"], version=manifest["version"], previous_version=manifest["previous_version"],
        previous_through=manifest["previous_through"],
        migrations=tuple(Migration(m["id"], m["up"], m["down"]) for m in manifest["migrations"]),
        seed=tuple(manifest["seed"]), uninstall=manifest["uninstall"], functions=dict(manifest["functions"]),
        volatile_columns=tuple(manifest["volatile_columns"]), files=blobs,
        tasks=tuple(TaskDef(t["id"], t["source"], t["digest"], t.get("timeout_seconds"))
                    for t in manifest.get("tasks", [])),
        pairing={m["id"]: _stored_rule(m) for m in manifest["migrations"] if m["down"] is not None},
        workflows=tuple(WorkflowDef(w["id"], tuple(w["steps"]), w["digest"]) for w in manifest.get("workflows", [])))


def _stored_rule(migration: dict[str, Any]) -> str:
    """The pairing rule of a frozen migration: ``"version"`` when recorded, else what its paths show."""
    if migration.get("pairing") == "version":
        return "version"
    if str(migration["up"]).endswith("/up.sql") and str(migration["down"]).endswith("/down.sql"):
        return "folder"
    return "name"
