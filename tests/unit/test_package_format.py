"""Package validation (``load_package``): every error path is ``InvalidInput`` with a clear one-line message,
and migration discovery handles both layouts in id order."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fencepost.catalog.manifest import MANIFEST_NAME, load_package, package_from_run
from fencepost.core.errors import InvalidInput
from unit.builders import MINIMAL_MANIFEST, PackageWriter

UP = "CREATE TABLE t (id INTEGER PRIMARY KEY);\n"
DOWN = "DROP TABLE t;\n"


def _manifest(extra: str = "", package_extra: str = "") -> str:
    return MINIMAL_MANIFEST + package_extra + extra


def _error(directory: Path | str) -> str:
    with pytest.raises(InvalidInput) as caught:
        load_package(directory)
    message = str(caught.value)
    assert "\n" not in message, "an InvalidInput message is one line"
    return message


class TestValidPackages:
    def test_minimal_package_discovers_migrations_dir(self, write_package: PackageWriter) -> None:
        root = write_package({MANIFEST_NAME: _manifest(), "migrations/0001_t.up.sql": UP,
                              "migrations/0001_t.down.sql": DOWN})
        spec = load_package(root)
        assert [(m.id, m.up, m.down) for m in spec.migrations] == [
            ("0001_t", "migrations/0001_t.up.sql", "migrations/0001_t.down.sql")]
        assert spec.uninstall_method == "down_migrations"
        assert set(spec.files) == {MANIFEST_NAME, "migrations/0001_t.up.sql", "migrations/0001_t.down.sql"}

    def test_discovery_of_both_layouts_ordered_by_id(self, write_package: PackageWriter) -> None:
        root = write_package({
            MANIFEST_NAME: _manifest(),
            "migrations/0010_folder/up.sql": UP, "migrations/0010_folder/down.sql": DOWN,
            "migrations/0002_file.up.sql": UP,
            "migrations/0001_first.up.sql": UP, "migrations/0001_first.down.sql": DOWN,
            "migrations/V0003.Mixed_Case.up.sql": UP,
            "migrations/0003_folder_without_down/up.sql": UP,
            "migrations/README.md": "not a migration",
            "migrations/notes/readme.txt": "a folder without up.sql is ignored",
        })
        spec = load_package(root)
        assert [(m.id, m.up, m.down) for m in spec.migrations] == [
            ("0001_first", "migrations/0001_first.up.sql", "migrations/0001_first.down.sql"),
            ("0002_file", "migrations/0002_file.up.sql", None),
            ("0003_folder_without_down", "migrations/0003_folder_without_down/up.sql", None),
            ("0010_folder", "migrations/0010_folder/up.sql", "migrations/0010_folder/down.sql"),
            ("V0003.Mixed_Case", "migrations/V0003.Mixed_Case.up.sql", None),  # byte order: digits < 'V'
        ]
        assert spec.uninstall_method is None  # not every migration has a down
        assert "migrations/README.md" not in spec.files

    def test_custom_migrations_dir_and_explicit_entries(self, write_package: PackageWriter) -> None:
        discovered = write_package({MANIFEST_NAME: _manifest(package_extra='migrations_dir = "sql/m"\n'),
                                    "sql/m/b/up.sql": UP, "sql/m/a/up.sql": UP})
        assert [m.id for m in load_package(discovered).migrations] == ["a", "b"]
        explicit = write_package({
            MANIFEST_NAME: _manifest(
                package_extra='seed = ["seed/data.sql"]\nuninstall = "drop.sql"\n',
                extra='[[migrations]]\nid = "z_last"\nup = "one.sql"\n'
                      '[[migrations]]\nid = "a_first"\nup = "two.sql"\ndown = "two.down.sql"\n'),
            "one.sql": UP, "two.sql": "CREATE TABLE u (x);", "two.down.sql": "DROP TABLE u;",
            "seed/data.sql": "INSERT INTO t VALUES (1);", "drop.sql": DOWN})
        spec = load_package(explicit)
        assert [m.id for m in spec.migrations] == ["z_last", "a_first"]  # explicit order is kept as written
        assert spec.seed == ("seed/data.sql",)
        assert spec.uninstall_method == "uninstall_script"

    def test_previous_version_and_host_functions(self, write_package: PackageWriter) -> None:
        root = write_package({
            MANIFEST_NAME: _manifest(
                package_extra='previous_version = "0.9"\nprevious_through = "0001_a"\n',
                extra='[sqlite]\nfunctions = { BIN2B64 = "base64_encode", B642BIN = "base64_decode" }\n'
                      '[verify]\nvolatile_columns = ["last_update"]\n'),
            "migrations/0001_a.up.sql": UP, "migrations/0002_b.up.sql": "CREATE TABLE u (x);"})
        spec = load_package(root)
        assert spec.through_index() == 1
        assert spec.functions == {"BIN2B64": "base64_encode", "B642BIN": "base64_decode"}
        assert spec.volatile_columns == ("last_update",)

    def test_symlink_inside_the_package_is_allowed(self, write_package: PackageWriter) -> None:
        root = write_package({MANIFEST_NAME: _manifest(extra='[[migrations]]\nid = "a"\nup = "link.sql"\n'),
                              "real/a.sql": UP})
        os.symlink(root / "real" / "a.sql", root / "link.sql")
        assert load_package(root).files["link.sql"] == UP.encode()

    def test_content_digest_covers_file_bytes_and_round_trips_through_a_run(self,
                                                                          write_package: PackageWriter) -> None:
        files: dict[str, str | bytes] = {MANIFEST_NAME: _manifest(), "migrations/0001_t.up.sql": UP}
        one, two = load_package(write_package(files)), load_package(write_package(files))
        assert one.content_digest == two.content_digest
        changed = load_package(write_package({**files, "migrations/0001_t.up.sql": UP + "-- edit\n"}))
        assert changed.content_digest != one.content_digest
        frozen = package_from_run(one.normalized_manifest(), one.run_files())
        assert frozen.content_digest == one.content_digest

    def test_a_frozen_file_that_no_longer_matches_its_digest_is_refused(self, write_package: PackageWriter) -> None:
        spec = load_package(write_package({MANIFEST_NAME: _manifest(), "migrations/0001_t.up.sql": UP}))
        files = spec.run_files()
        tampered = [type(f)(path=f.path, sha256=f.sha256, size=f.size, content=f.content + b" ") for f in files]
        with pytest.raises(ValueError, match="does not match its recorded digest"):
            package_from_run(spec.normalized_manifest(), tampered)


class TestInvalidPackages:
    def test_missing_directory(self, tmp_path: Path) -> None:
        assert "does not exist" in _error(tmp_path / "nowhere")

    def test_a_file_given_as_the_directory(self, tmp_path: Path) -> None:
        (tmp_path / "file.txt").write_text("not a package", encoding="utf-8")
        assert "is a file, not a directory" in _error(tmp_path / "file.txt")

    def test_missing_manifest(self, write_package: PackageWriter) -> None:
        assert f"no {MANIFEST_NAME}" in _error(write_package({"migrations/0001_a.up.sql": UP}))

    def test_bad_toml(self, write_package: PackageWriter) -> None:
        message = _error(write_package({MANIFEST_NAME: "[package\nname = 'x'", "migrations/0001_a.up.sql": UP}))
        assert "is not valid TOML" in message

    def test_manifest_not_utf8(self, write_package: PackageWriter) -> None:
        message = _error(write_package({MANIFEST_NAME: b'[package]\nname = "\xff"\n'}))
        assert "is not valid TOML" in message

    @pytest.mark.parametrize(("extra", "where"), [
        ('colour = "blue"\n', "package.colour"),
        ('[[migrations]]\nid = "a"\nup = "a.sql"\nbefore = "x"\n', "migrations.0.before"),
        ('[verify]\nvolatile = ["x"]\n', "verify.volatile"),
        ('[extra]\nx = 1\n', "extra"),
    ])
    def test_unknown_key(self, write_package: PackageWriter, extra: str, where: str) -> None:
        manifest = _manifest(package_extra=extra) if extra.startswith("colour") else _manifest(extra=extra)
        message = _error(write_package({MANIFEST_NAME: manifest, "a.sql": UP, "migrations/0001_a.up.sql": UP}))
        assert message == f"{MANIFEST_NAME}: {where}: unknown key"

    def test_missing_required_key(self, write_package: PackageWriter) -> None:
        message = _error(write_package({MANIFEST_NAME: '[package]\nname = "demo"\n', "migrations/0001_a.up.sql": UP}))
        assert "package.version" in message and "required" in message.lower()

    @pytest.mark.parametrize(("field", "needle"), [
        ('name = "Bad Name"', "package.name"),
        ('name = "ok"\nversion = "1 0"', "package.version"),
    ])
    def test_bad_name_or_version(self, write_package: PackageWriter, field: str, needle: str) -> None:
        manifest = f'[package]\n{field}\n' + ('version = "1"\n' if "version" not in field else "")
        message = _error(write_package({MANIFEST_NAME: manifest, "migrations/0001_a.up.sql": UP}))
        assert needle in message
        assert "Value error" not in message

    def test_validator_messages_are_ours_not_pydantics(self, write_package: PackageWriter) -> None:
        manifest = '[package]\nname = "Bad Name"\nversion = "1"\n'
        message = _error(write_package({MANIFEST_NAME: manifest, "migrations/0001_a.up.sql": UP}))
        assert message == (f"{MANIFEST_NAME}: package.name: name must match [a-z0-9][a-z0-9._-]* "
                           "(at most 100 chars)")
        manifest = '[package]\nname = "demo"\nversion = "1"\nprevious_version = "0.9"\n'
        message = _error(write_package({MANIFEST_NAME: manifest, "migrations/0001_a.up.sql": UP}))
        assert message == f"{MANIFEST_NAME}: package: previous_version and previous_through go together"

    def test_unknown_key_in_tasks_and_workflows(self, write_package: PackageWriter) -> None:
        extra = '[[tasks]]\nid = "t"\nsource = "t.sql"\nkind = "sql"\n'
        message = _error(write_package({MANIFEST_NAME: _manifest(extra=extra), "t.sql": UP,
                                        "migrations/0001_a.up.sql": UP}))
        assert message == f"{MANIFEST_NAME}: tasks.0.kind: unknown key"

    def test_missing_file(self, write_package: PackageWriter) -> None:
        root = write_package({MANIFEST_NAME: _manifest(extra='[[migrations]]\nid = "a"\nup = "missing.sql"\n')})
        message = _error(root)
        assert "migration a: file 'missing.sql' does not exist in the package" in message

    def test_missing_seed_file(self, write_package: PackageWriter) -> None:
        root = write_package({MANIFEST_NAME: _manifest(package_extra='seed = ["seed/none.sql"]\n'),
                              "migrations/0001_a.up.sql": UP})
        assert "seed: file 'seed/none.sql' does not exist" in _error(root)

    @pytest.mark.parametrize("path", ["../outside.sql", "sql/../../outside.sql", "a/../../b.sql"])
    def test_path_with_dot_dot(self, write_package: PackageWriter, path: str) -> None:
        root = write_package({MANIFEST_NAME: _manifest(extra=f'[[migrations]]\nid = "a"\nup = "{path}"\n')})
        (root.parent / "outside.sql").write_text(UP)
        assert "must be a path inside the package (no '..', not absolute)" in _error(root)

    @pytest.mark.parametrize("key", ["up", "uninstall"])
    def test_absolute_path(self, write_package: PackageWriter, tmp_path: Path, key: str) -> None:
        target = tmp_path / "abs.sql"
        target.write_text(UP)
        if key == "up":
            manifest = _manifest(extra=f'[[migrations]]\nid = "a"\nup = "{target}"\n')
        else:
            manifest = _manifest(package_extra=f'uninstall = "{target}"\n')
        root = write_package({MANIFEST_NAME: manifest, "migrations/0001_a.up.sql": UP})
        assert "must be a path inside the package" in _error(root)

    def test_backslash_path_is_refused(self, write_package: PackageWriter) -> None:
        root = write_package({MANIFEST_NAME: _manifest(extra='[[migrations]]\nid = "a"\nup = "sql\\\\a.sql"\n')})
        assert "is not a valid relative path" in _error(root)

    def test_symlink_leaving_the_package(self, write_package: PackageWriter, tmp_path: Path) -> None:
        outside = tmp_path / "outside.sql"
        outside.write_text(UP)
        root = write_package({MANIFEST_NAME: _manifest()})
        (root / "migrations").mkdir()
        os.symlink(outside, root / "migrations" / "0001_a.up.sql")
        assert "'migrations/0001_a.up.sql' leaves the package directory" in _error(root)

    def test_symlinked_migrations_dir_leaving_the_package(self, write_package: PackageWriter,
                                                          tmp_path: Path) -> None:
        outside = tmp_path / "elsewhere"
        outside.mkdir()
        (outside / "0001_a.up.sql").write_text(UP)
        root = write_package({MANIFEST_NAME: _manifest()})
        os.symlink(outside, root / "migrations")
        assert "leaves the package directory" in _error(root)

    def test_non_utf8_sql(self, write_package: PackageWriter) -> None:
        root = write_package({MANIFEST_NAME: _manifest(), "migrations/0001_a.up.sql": b"SELECT '\xff\xfe';"})
        assert "migration 0001_a: 'migrations/0001_a.up.sql' is not UTF-8 text" in _error(root)

    def test_duplicate_migration_id(self, write_package: PackageWriter) -> None:
        extra = '[[migrations]]\nid = "a"\nup = "one.sql"\n[[migrations]]\nid = "a"\nup = "two.sql"\n'
        root = write_package({MANIFEST_NAME: _manifest(extra=extra), "one.sql": UP, "two.sql": UP})
        assert "duplicate migration id 'a'" in _error(root)

    def test_previous_through_unknown(self, write_package: PackageWriter) -> None:
        root = write_package({
            MANIFEST_NAME: _manifest(package_extra='previous_version = "0.9"\nprevious_through = "0007_nope"\n'),
            "migrations/0001_a.up.sql": UP})
        assert "previous_through '0007_nope' is not a migration id" in _error(root)

    @pytest.mark.parametrize("extra", ['previous_version = "0.9"\n', 'previous_through = "0001_a"\n'])
    def test_previous_version_without_previous_through(self, write_package: PackageWriter, extra: str) -> None:
        root = write_package({MANIFEST_NAME: _manifest(package_extra=extra), "migrations/0001_a.up.sql": UP})
        assert "previous_version and previous_through go together" in _error(root)

    def test_previous_version_equal_to_version(self, write_package: PackageWriter) -> None:
        root = write_package({
            MANIFEST_NAME: _manifest(package_extra='previous_version = "1.0.0"\nprevious_through = "0001_a"\n'),
            "migrations/0001_a.up.sql": UP})
        assert "previous_version must differ from version" in _error(root)

    def test_both_explicit_migrations_and_migrations_dir(self, write_package: PackageWriter) -> None:
        root = write_package({
            MANIFEST_NAME: _manifest(package_extra='migrations_dir = "migrations"\n',
                                     extra='[[migrations]]\nid = "a"\nup = "a.sql"\n'),
            "a.sql": UP, "migrations/0001_a.up.sql": UP})
        assert "give either [[migrations]] or package.migrations_dir, not both" in _error(root)

    def test_bad_host_function_name(self, write_package: PackageWriter) -> None:
        # Whether an implementation exists is checked at `rehearsal create` (tests/integration/
        # test_real_histories.py); the manifest only checks the name's shape.
        root = write_package({MANIFEST_NAME: _manifest(extra='[sqlite]\nfunctions = { SHA1 = "sha 1" }\n'),
                              "migrations/0001_a.up.sql": UP})
        assert "'sha 1' is not a valid host function name" in _error(root)

    def test_bad_sql_function_name(self, write_package: PackageWriter) -> None:
        root = write_package({MANIFEST_NAME: _manifest(extra='[sqlite]\nfunctions = { "1x" = "base64_encode" }\n'),
                              "migrations/0001_a.up.sql": UP})
        assert "'1x' is not a valid SQL function name" in _error(root)

    @pytest.mark.parametrize("name", ["like", "LIKE", "Coalesce", "count"])
    def test_a_sql_function_fenceposts_checks_call_cannot_be_replaced(self, write_package: PackageWriter,
                                                                      name: str) -> None:
        # registered on the sandbox connection, a two-argument host function named like answered every
        # `name NOT LIKE 'sqlite_%'` of fencepost's checks: no object was seen, the uninstall was "empty"
        root = write_package({MANIFEST_NAME: _manifest(extra=f'[sqlite]\nfunctions = {{ {name} = "pair" }}\n'),
                              "migrations/0001_a.up.sql": UP})
        assert f"SQL function {name!r} cannot be replaced by a host function" in _error(root)

    def test_no_migrations_found(self, write_package: PackageWriter) -> None:
        root = write_package({MANIFEST_NAME: _manifest(), "migrations/readme.txt": "nothing"})
        assert "no migrations found in 'migrations'" in _error(root)

    def test_migrations_dir_missing(self, write_package: PackageWriter) -> None:
        assert "migrations_dir 'migrations' is not a directory" in _error(write_package({MANIFEST_NAME: _manifest()}))

    def test_empty_explicit_migration_list(self, write_package: PackageWriter) -> None:
        root = write_package({MANIFEST_NAME: "migrations = []\n" + _manifest()})
        assert "a package needs at least one migration" in _error(root)

    def test_down_without_up(self, write_package: PackageWriter) -> None:
        root = write_package({MANIFEST_NAME: _manifest(), "migrations/0001_a.up.sql": UP,
                              "migrations/0002_b.down.sql": DOWN})
        assert ("migration '0002_b' has a down file (migrations/0002_b.down.sql) but no up file with the same "
                "name or the same numeric version") in _error(root)

    def test_migration_id_shape(self, write_package: PackageWriter) -> None:
        root = write_package({MANIFEST_NAME: _manifest(extra='[[migrations]]\nid = "has space"\nup = "a.sql"\n'),
                              "a.sql": UP})
        assert "migration id must be" in _error(root)

    def test_migration_path_is_a_directory(self, write_package: PackageWriter) -> None:
        root = write_package({MANIFEST_NAME: _manifest(extra='[[migrations]]\nid = "a"\nup = "sql"\n'),
                              "sql/a.sql": UP})
        assert "'sql' is not a file" in _error(root)


def test_a_trailing_newline_is_not_part_of_a_valid_name_or_version(tmp_path: Path) -> None:
    pkg = tmp_path / "nl"
    (pkg / "migrations").mkdir(parents=True)
    (pkg / "migrations" / "0001_a.up.sql").write_text("CREATE TABLE a (x);\n")
    (pkg / "fencepost-package.toml").write_text('[package]\nname = "inventory\\n"\nversion = "1.0.0"\n')
    with pytest.raises(InvalidInput, match=r"package\.name"):
        load_package(pkg)
    (pkg / "fencepost-package.toml").write_text('[package]\nname = "inventory"\nversion = "1.0.0\\n"\n')
    with pytest.raises(InvalidInput, match=r"package\.version"):
        load_package(pkg)


def test_a_manifest_linked_from_outside_the_package_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "fencepost-package.toml").write_text('[package]\nname = "x"\nversion = "1"\n')
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "fencepost-package.toml").symlink_to(outside / "fencepost-package.toml")
    with pytest.raises(InvalidInput, match="link leaving the package"):
        load_package(pkg)


def test_an_oversize_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    pkg = tmp_path / "big"
    (pkg / "migrations").mkdir(parents=True)
    big = pkg / "migrations" / "0001_a.up.sql"
    with big.open("wb") as fh:  # sparse: 65 MiB on paper, nothing on disk
        fh.truncate(65 * 1024 * 1024)
    (pkg / "fencepost-package.toml").write_text('[package]\nname = "big"\nversion = "1"\n')
    with pytest.raises(InvalidInput, match="larger than"):
        load_package(pkg)


def test_a_manifest_nested_too_deeply_is_one_clear_error(tmp_path: Path) -> None:
    pkg = tmp_path / "deep"
    pkg.mkdir()
    (pkg / "fencepost-package.toml").write_text(
        '[package]\nname = "x"\nversion = "1"\ndescription = ' + "[" * 2000 + "]" * 2000 + "\n")
    with pytest.raises(InvalidInput, match="nests too deeply"):
        load_package(pkg)
