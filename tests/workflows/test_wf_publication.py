"""Publication: immutable records bound to exact digests, a compare-and-set head, the release gate by
default, withdrawal and installation lifecycle (issue 6 "What a user must be able to do"), on every backend.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from wf_support import PACKAGE, WORKFLOW, World, assert_refused, cli

from fencepost.catalog.digests import definition_digest
from fencepost.catalog.manifest import load_package
from fencepost.core.errors import Conflict, IntegrityViolation, InvalidInput, NotAllowed, NotFound


def test_publish_refuses_without_a_passing_gate_and_writes_nothing(world: World) -> None:
    before = world.counts()
    with pytest.raises(NotAllowed) as caught:
        world.catalog.publish(world.package())
    assert caught.value.guard == "release_gate"
    assert "guard release_gate" in str(caught.value) and "no rehearsal" in str(caught.value)
    assert world.counts() == before


def test_allow_ungated_records_the_gate_as_waived(world: World) -> None:
    result = world.catalog.publish(world.package(), allow_ungated=True)
    assert result.outcome == "created"
    publication = result.publication
    assert (publication.gate, publication.gate_run_id, publication.status) == ("waived", None, "active")
    state = world.catalog.state(PACKAGE)
    assert state.head is not None and (state.head.publication_id, state.head.revision) == (publication.id, 1)


def test_a_publication_is_bound_to_the_exact_content_and_definition_digests(world: World) -> None:
    directory = world.package(extract_sql="SELECT 'extract';")
    publication = world.catalog.publish(directory, allow_ungated=True).publication
    spec = load_package(directory)
    assert publication.content_digest == spec.content_digest
    tasks = publication.definition["tasks"]
    for task in ("extract", "load"):
        raw = (directory / "tasks" / f"{task}.sql").read_bytes()
        assert tasks[task]["digest"] == "sha256:" + hashlib.sha256(raw).hexdigest()
    steps = publication.definition["workflows"][WORKFLOW]["steps"]
    assert steps == [{"key": "extract", "task": "extract", "needs": []},
                     {"key": "load", "task": "load", "needs": ["extract"]}]
    assert publication.definition_digest == definition_digest(publication.definition)
    other = world.catalog.publish(world.package("1.0.1", extract_sql="SELECT 'changed';"), allow_ungated=True)
    assert other.publication.definition["tasks"]["extract"]["digest"] != tasks["extract"]["digest"]
    assert other.publication.definition["tasks"]["load"] == tasks["load"]


def test_republishing_the_same_content_answers_existing(world: World) -> None:
    first = world.catalog.publish(world.package(), allow_ungated=True)
    before = world.counts()
    again = world.catalog.publish(world.package(), allow_ungated=True)
    assert again.outcome == "existing" and again.publication == first.publication
    assert world.counts() == before


def test_publishing_an_existing_version_with_other_content_is_a_conflict(world: World) -> None:
    world.publish()
    before = world.counts()
    changed = world.package(load_sql="DELETE FROM t;")
    with pytest.raises(Conflict, match="immutable"):
        world.catalog.publish(changed, allow_ungated=True)
    assert world.counts() == before


def test_the_head_moves_by_compare_and_set(world: World) -> None:
    with pytest.raises(Conflict, match="revision 0, not 1"):
        world.catalog.publish(world.package("1.0.0"), allow_ungated=True, expected_revision=1)
    first = world.catalog.publish(world.package("1.0.0"), allow_ungated=True, expected_revision=0).publication
    before = world.counts()
    for wrong in (0, 2, 7):
        with pytest.raises(Conflict, match=f"revision 1, not {wrong}"):
            world.catalog.publish(world.package("2.0.0"), allow_ungated=True, expected_revision=wrong)
    assert world.counts() == before
    second = world.catalog.publish(world.package("2.0.0"), allow_ungated=True, expected_revision=1).publication
    assert second.previous_publication_id == first.id
    head = world.catalog.state(PACKAGE).head
    assert head is not None and (head.publication_id, head.revision) == (second.id, 2)
    assert head.updated_at == second.published_at      # one instant per transaction


def test_withdraw_and_install_lifecycle(world: World) -> None:
    world.publish("1.0.0")
    world.publish("2.0.0")
    installed = world.catalog.install(PACKAGE)
    assert (installed.status, installed.generation) == ("active", 1)
    withdrawn = world.catalog.withdraw(PACKAGE, "1.0.0")
    assert withdrawn.status == "withdrawn" and withdrawn.withdrawn_at is not None
    with pytest.raises(Conflict, match="already withdrawn"):
        world.catalog.withdraw(PACKAGE, "1.0.0")
    with pytest.raises(NotAllowed) as caught:
        world.catalog.install(PACKAGE, "1.0.0")
    assert caught.value.guard == "publication_active"
    with pytest.raises(NotFound):
        world.catalog.withdraw(PACKAGE, "9.9.9")
    with pytest.raises(NotFound):
        world.catalog.install("absent")
    with pytest.raises(NotFound):
        world.catalog.quarantine("absent", "why")
    with pytest.raises(InvalidInput):
        world.catalog.quarantine(PACKAGE, "   ")
    again = world.catalog.install(PACKAGE, "2.0.0")
    assert again.id == installed.id and again.generation == 2


def test_a_tampered_publication_definition_fails_admission_closed(world: World) -> None:
    world.ready()
    plan = world.plan("p1")
    before = world.counts()
    # the definition keeps its mirrored columns (package, version, content digest) but drops a need
    world.sql("UPDATE package_publications SET definition = replace(definition, '\"needs\":[\"extract\"]', "
              "'\"needs\":[]')")
    with pytest.raises(IntegrityViolation, match="does not match its digest"):
        world.admit(plan)
    assert world.counts() == before


# ── the real release gate, through the CLI, on SQLite and PostgreSQL ──
@pytest.mark.slow
def test_publish_uses_the_rehearsal_gate_by_default(lean_world: World, tmp_path: Path) -> None:
    w = lean_world
    url = w.cli_url
    good = w.package("1.0.0")
    assert_refused(cli(url, "package", "publish", str(good)), 6, "release_gate", "no rehearsal")
    rehearsed = cli(url, "rehearse", str(good), "--work-dir", str(tmp_path / "work"), "--json")
    assert rehearsed.returncode == 0, rehearsed.describe()
    published = cli(url, "package", "publish", str(good), "--json")
    assert published.returncode == 0, published.describe()
    view = published.json()["publication"]
    assert (view["gate"], view["gate_run_id"]) == ("passed", rehearsed.json()["rehearsal"]["id"])
    # a version whose rehearsal fails its gate is refused, naming the gate, unless waived
    broken = w.package("2.0.0", migration_sql="CREATE TABLE t (id INTEGER PRIMARY KEY;\n")
    failed = cli(url, "rehearse", str(broken), "--work-dir", str(tmp_path / "work"), "--json")
    assert failed.returncode == 1, failed.describe()
    assert_refused(cli(url, "package", "publish", str(broken)), 6, "release_gate", "2.0.0")
    waived = cli(url, "package", "publish", str(broken), "--allow-ungated", "--json")
    assert waived.returncode == 0, waived.describe()
    assert (waived.json()["publication"]["gate"], waived.json()["publication"]["gate_run_id"]) == ("waived", None)
