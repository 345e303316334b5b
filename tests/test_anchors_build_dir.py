"""The anchors build writes a model's folder beside its place and renames it in when complete
(benchmarks/anchors.py): an earlier build goes only once the new one is there, and nothing
else in the output folder is touched."""

from __future__ import annotations

from tests.helpers import load_benchmark


def _folder(path, text):
    path.mkdir()
    (path / "meta.json").write_text(text)
    return path


def test_a_complete_build_replaces_the_earlier_one(tmp_path):
    anchors = load_benchmark("anchors")
    earlier = _folder(tmp_path / "resnet-18", "old")
    other = _folder(tmp_path / "yolo-v2", "keep")
    new = _folder(tmp_path / ".resnet-18.partial", "new")
    anchors.replace(new, earlier)
    assert (tmp_path / "resnet-18" / "meta.json").read_text() == "new"
    assert (other / "meta.json").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["resnet-18", "yolo-v2"]


def test_a_first_build_moves_into_place(tmp_path):
    anchors = load_benchmark("anchors")
    new = _folder(tmp_path / ".bert-base.partial", "new")
    anchors.replace(new, tmp_path / "bert-base")
    assert [p.name for p in tmp_path.iterdir()] == ["bert-base"]
