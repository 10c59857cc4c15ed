"""A resource's identity: what it is built from and what the build gave, never where or
when it was built."""

from servesweep.resources.identity import SPEC_CHANGED, changes, content_identity, identity

STACK = {
    "stack": "cpu",
    "kind": "venv",
    "status": "ok",
    "python": "/a/resources/stacks/cpu/venv/bin/python",
    "python_version": "3.11.7",
    "torch": "2.5.1",
    "transformers": "5.24.0",
    "freeze_sha256": "f" * 64,
    "cpu_model": "AMD EPYC",
    "built_at": "2026-12-01T10:00:00+00:00",
    "build_s": 120.0,
}
MODEL = {
    "model": "tiny",
    "status": "ok",
    "path": "/a/resources/models/tiny/files",
    "files": [{"path": "config.json", "size": 9, "sha256": "a" * 64}],
    "built_s": 1.2,
}


def test_a_rebuild_elsewhere_later_on_another_host_is_the_same_resource():
    moved = {
        **STACK,
        "python": "/b/resources/stacks/cpu/venv/bin/python",
        "cpu_model": "Intel Xeon",
        "built_at": "2026-12-05T10:00:00+00:00",
        "build_s": 99.0,
    }
    assert content_identity(moved) == content_identity(STACK)
    model = {**MODEL, "path": "/b/resources/models/tiny/files", "built_s": 3.0}
    assert content_identity(model) == content_identity(MODEL)
    assert changes(STACK, moved, None) is None and changes(MODEL, model, None) is None


def test_another_version_or_other_files_are_named():
    newer = {**STACK, "transformers": "5.25.0"}
    assert changes(STACK, newer, None) == "transformers 5.24.0 → 5.25.0"
    assert changes(STACK, {**STACK, "freeze_sha256": "e" * 64}, None) == "its pip freeze differs"
    other = {**MODEL, "files": [{"path": "config.json", "size": 9, "sha256": "b" * 64}]}
    assert changes(MODEL, other, None) == "its files differ"


def test_the_spec_is_known_before_the_build_and_a_file_counts_by_content(tmp_path):
    req = tmp_path / "req.txt"
    req.write_text("torch==2.5.1\n")
    config = {"kind": "venv", "requirements": str(req)}
    recorded = {**STACK, "identity": identity(config, STACK)}
    assert changes(recorded, None, identity(config, STACK)["spec"]) is None
    req.touch()  # a newer file of the same content is the same spec
    assert changes(recorded, None, identity(config, STACK)["spec"]) is None
    req.write_text("torch==2.6.0\n")
    assert changes(recorded, None, identity(config, STACK)["spec"]) == SPEC_CHANGED
    # A manifest from before identities: compared by content only.
    assert changes(STACK, None, identity(config, STACK)["spec"]) is None


def test_a_failed_setup_has_no_content():
    assert content_identity({"stack": "cpu", "status": "failed"}) is None
    assert content_identity(None) is None
