"""Nothing a command writes destroys a user's file: the rules of :mod:`codl_tvm.outputs`, and
the commands that write (compile, run, plan, bench, train, calibrate, explain, profile bundles)
called as a user calls them, in a working directory full of the user's files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import codl_tvm
from codl_tvm import outputs, zoo
from codl_tvm.cli import main as cli_main


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes (what a command must leave alone)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    return Path(zoo.get("tiny-cnn"))


@pytest.fixture()
def user_dir(tmp_path, model_file, monkeypatch) -> Path:
    """A user's project folder holding their model and notes; the working directory."""
    d = tmp_path / "project"
    d.mkdir()
    (d / "model.onnx").write_bytes(model_file.read_bytes())
    (d / "notes.txt").write_text("mine")
    (d / "data").mkdir()
    (d / "data" / "x.bin").write_bytes(b"\x00\x01")
    monkeypatch.chdir(d)
    return d


def refused(capsys, argv: list[str], *words: str) -> str:
    """The CLI exits 1 with one line naming the problem."""
    capsys.readouterr()  # what earlier calls printed
    assert cli_main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    for word in words:
        assert word in err[0], err[0]
    return err[0]


def test_compile_refuses_the_working_directory_and_deletes_nothing(user_dir, capsys):
    before = snapshot(user_dir)
    for out in (".", str(user_dir), str(user_dir.parent), "data/.."):
        refused(capsys, ["compile", "model.onnx", "--pair", "cpu-pair", "-o", out],
                "refusing", "working directory")
    assert snapshot(user_dir) == before


def test_compile_refuses_a_folder_that_is_not_an_artifact(user_dir, capsys):
    before = snapshot(user_dir)
    refused(capsys, ["compile", "model.onnx", "--pair", "cpu-pair", "-o", "data", "--overwrite"],
            "data", "not a codl-tvm folder")
    assert snapshot(user_dir) == before


def test_compile_refuses_a_folder_holding_the_model(tmp_path, model_file, capsys):
    models = tmp_path / "models"
    models.mkdir()
    (models / "m.onnx").write_bytes(model_file.read_bytes())
    refused(capsys, ["compile", str(models / "m.onnx"), "--pair", "cpu-pair", "-o", str(models)],
            "holds the input")
    assert (models / "m.onnx").exists()


def test_compile_overwrites_an_artifact_only_when_asked(user_dir, capsys):
    argv = ["compile", "model.onnx", "--pair", "cpu-pair", "-o", "art"]
    assert cli_main(argv) == 0
    first = snapshot(user_dir / "art")
    refused(capsys, argv, "art", "--overwrite")
    assert snapshot(user_dir / "art") == first
    assert cli_main([*argv, "--overwrite"]) == 0
    assert (user_dir / "art" / "manifest.json").exists()
    # no temporary or moved-aside folder is left beside it
    assert sorted(p.name for p in user_dir.iterdir()) == ["art", "data", "model.onnx",
                                                          "notes.txt"]


def test_compile_into_an_empty_folder_is_allowed(user_dir):
    (user_dir / "empty").mkdir()
    assert cli_main(["compile", "model.onnx", "--pair", "cpu-pair", "-o", "empty"]) == 0
    assert (user_dir / "empty" / "lib.so").exists()


def test_a_failed_export_leaves_the_old_artifact_and_no_temporary(user_dir):
    exe = codl_tvm.compile(codl_tvm.load_model("model.onnx"),
                           codl_tvm.DevicePair.preset("cpu-pair"))
    exe.export("art")
    before = snapshot(user_dir)

    def broken(folder: Path) -> dict:
        (folder / "half").write_text("x")
        raise RuntimeError("linker failed")

    with pytest.raises(RuntimeError, match="linker failed"):
        exe.export("art", write_library=broken, overwrite=True)
    assert snapshot(user_dir) == before


def test_run_names_outputs_by_the_model_and_never_overwrites_its_inputs(user_dir, capsys):
    assert cli_main(["compile", "model.onnx", "--pair", "cpu-pair", "-o", "art"]) == 0
    import onnx

    names = [o.name for o in onnx.load("model.onnx").graph.output]
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    np.savez("x.npz", input=x)
    assert cli_main(["run", "art", "--inputs", "x.npz", "-o", "y.npz"]) == 0
    with np.load("y.npz") as out:
        assert out.files == names
    before = snapshot(user_dir)
    refused(capsys, ["run", "art", "--inputs", "x.npz", "-o", "x.npz"], "x.npz", "input")
    assert snapshot(user_dir) == before


def test_plan_and_train_refuse_to_write_over_their_inputs(user_dir, capsys, tmp_path):
    before = snapshot(user_dir)
    refused(capsys, ["plan", "model.onnx", "--pair", "cpu-pair", "--strategy", "gpu-only",
                     "-o", "model.onnx"], "model.onnx", "input")
    (user_dir / "s.csv").write_text("pair,op\n")
    refused(capsys, ["train", "s.csv", "-o", "s.csv"], "s.csv")
    refused(capsys, ["plan", "model.onnx", "--pair", "cpu-pair", "--strategy", "gpu-only",
                     "-o", "data"], "data", "folder")
    assert snapshot(user_dir) == {**before, "s.csv": b"pair,op\n"}


def test_bench_writes_its_cache_where_it_was_told(user_dir, tmp_path):
    """Without --json the measured-costs cache goes to the working directory, not its parent."""
    from codl_tvm.commands.plan import cache_folder

    assert cache_folder(None) == Path.cwd()
    assert cache_folder("out/rows.json") == (user_dir / "out").resolve()
    outside = snapshot(user_dir.parent)
    assert cli_main(["bench", "model.onnx", "--pair", "cpu-pair", "--plans", "gpu-only",
                     "--rounds", "1"]) == 0
    assert {k for k in snapshot(user_dir.parent) if k not in outside} <= {
        f"project/{k}" for k in snapshot(user_dir)}


def test_profile_bundle_replaces_only_its_own_bundle(user_dir, capsys):
    argv = ["profile-bundle", "--pair", "cpu-pair", "--quick", "--max-mib", "0.001", "-o"]
    refused(capsys, [*argv, "data"], "not a codl-tvm folder")
    refused(capsys, [*argv, "."], "working directory")
    assert cli_main([*argv, "b"]) == 0
    manifest = json.loads((user_dir / "b" / "manifest.json").read_text())
    assert manifest["format"] == outputs.BUNDLE_FORMAT
    refused(capsys, [*argv, "b"], "--overwrite")
    assert cli_main([*argv, "b", "--overwrite"]) == 0


# ---- the rules, on any path hypothesis draws ---------------------------------------------

NAMES = st.sampled_from(["a", "b", "art", ".", "..", "data", "model.onnx"])


@settings(max_examples=60, deadline=None)
@given(parts=st.lists(NAMES, min_size=1, max_size=4), overwrite=st.booleans())
def test_a_folder_check_never_allows_a_folder_above_or_holding_an_input(
        tmp_path_factory, parts, overwrite):
    root = tmp_path_factory.mktemp("rules")
    (root / "data").mkdir()
    (root / "data" / "model.onnx").write_text("m")
    cwd = os.getcwd()
    os.chdir(root / "data")
    try:
        target = Path(*parts)
        resolved = target.resolve()
        try:
            outputs.check_output_folder(target, inputs=["model.onnx"], overwrite=overwrite)
        except outputs.OutputError:
            return
        # allowed: neither the working directory nor above it (which holds the input too),
        # and no folder with anything in it (nothing here is a codl-tvm folder)
        assert resolved != Path.cwd().resolve() and resolved not in Path.cwd().resolve().parents
        assert resolved != (root / "data" / "model.onnx").resolve()
        assert not (resolved.is_dir() and any(resolved.iterdir()))
    finally:
        os.chdir(cwd)


def test_file_writes_are_atomic(tmp_path):
    path = tmp_path / "p.json"
    outputs.write_json(path, {"a": 1})
    with pytest.raises(ZeroDivisionError), outputs.atomic_file(path) as tmp:
        tmp.write_text("half")
        1 / 0  # noqa: B018
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]
    with pytest.raises(outputs.OutputError, match="is a folder"):
        outputs.write_text(tmp_path, "x")


def test_outputs_get_the_users_usual_modes(tmp_path):
    umask = os.umask(0o022)
    try:
        outputs.write_text(tmp_path / "f.json", "{}")
        with outputs.atomic_folder(tmp_path / "d") as tmp:
            (tmp / "x").write_text("x")
    finally:
        os.umask(umask)
    assert (tmp_path / "f.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o755
