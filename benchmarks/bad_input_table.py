"""Every class of bad input the CLI takes, tried in a scratch project folder: the message, the
exit code, and whether anything in the folder changed (nothing may be deleted or left
half-written). Writes ``docs/BAD_INPUT.md``.

    python benchmarks/bad_input_table.py [-o docs/BAD_INPUT.md]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def project(d: Path) -> None:
    """A user's folder: a model, a plan, a predictor, samples, inputs, an artifact, notes."""
    import numpy as np
    import onnx

    import codl_tvm
    from codl_tvm import zoo

    (d / "model.onnx").write_bytes(Path(zoo.get("tiny-cnn")).read_bytes())
    mod = codl_tvm.load_model(d / "model.onnx")
    codl_tvm.Plan.uniform(mod, "H", 0.5).save(d / "plan.json")
    (d / "notes.txt").write_text("the user's own file\n")
    (d / "data").mkdir()
    (d / "data" / "keep.bin").write_bytes(b"\x00\x01")
    (d / "broken.json").write_text('{"format": "codl-tvm-plan", "ops": ')
    (d / "not-onnx.onnx").write_text("hello")
    (d / "bad-predictor.json").write_text(json.dumps({"kind": "codl", "version": 999}))
    (d / "bad-samples.csv").write_text("pair,op,latency_us\ncpu-pair,conv2d,abc\n")
    doc = codl_tvm.Plan.uniform(mod, "OC", 0.5).to_json()
    doc["ops"]["conv2d_99"] = {"place": "cpu"}
    (d / "unknown-op.json").write_text(json.dumps(doc))
    doc = codl_tvm.Plan.uniform(mod, "H", 0.5).to_json()
    doc["ops"]["conv2d_0"]["ratio"] = 1.5
    (d / "bad-ratio.json").write_text(json.dumps(doc))
    doc = codl_tvm.Plan.uniform(mod, "H", 0.5).to_json()
    doc["candidates"] = {"CPU x2": codl_tvm.Plan.uniform(mod, "H", 0.75).to_json()}
    (d / "bad-candidate.json").write_text(json.dumps(doc))
    dyn = onnx.load(d / "model.onnx")
    dyn.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    onnx.save(dyn, d / "dynamic.onnx")
    np.savez(d / "wrong-inputs.npz", nope=np.zeros(3, "float32"))
    np.savez(d / "wrong-shape.npz", input=np.zeros((1, 3, 5, 5), "float32"))
    np.savez(d / "x.npz", input=np.zeros((1, 3, 32, 32), "float32"))
    from codl_tvm.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(["compile", "model.onnx", "--pair", "cpu-pair", "-o", "art"])


# (what is wrong, argv)
CASES = [
    ("model file missing", ["compile", "missing.onnx", "--pair", "cpu-pair", "-o", "a"]),
    ("model is not ONNX", ["compile", "not-onnx.onnx", "--pair", "cpu-pair", "-o", "a"]),
    ("model has a dynamic input shape", ["compile", "dynamic.onnx", "--pair", "cpu-pair",
                                         "-o", "a"]),
    ("unknown zoo name", ["plan", "no-such-net", "--pair", "cpu-pair", "-o", "p.json"]),
    ("--shape malformed", ["compile", "model.onnx", "--shape", "input=1,3,x", "-o", "a"]),
    ("--shape names no input", ["compile", "model.onnx", "--shape", "nope=1,3,8,8", "-o", "a"]),
    ("unknown pair preset", ["compile", "model.onnx", "--pair", "no-pair", "-o", "a"]),
    ("--cpu-chunks below 1", ["compile", "model.onnx", "--pair", "cpu-pair", "--cpu-chunks",
                              "0", "-o", "a"]),
    ("--memory-cap below 1", ["plan", "model.onnx", "--pair", "cpu-pair", "--memory-cap",
                              "0.5", "-o", "p.json"]),
    ("pair JSON malformed", ["compile", "model.onnx", "--pair", '{"cpu": ', "-o", "a"]),
    ("pair shared_memory not a boolean", [
        "compile", "model.onnx", "--pair", '{"cpu": {"kind": "llvm"}, "gpu": {"kind": "llvm"}, '
        '"shared_memory": "yes"}', "-o", "a"]),
    ("plan not valid JSON", ["compile", "model.onnx", "--pair", "cpu-pair", "--plan",
                             "broken.json", "-o", "a"]),
    ("plan names an unknown op", ["compile", "model.onnx", "--pair", "cpu-pair", "--plan",
                                  "unknown-op.json", "-o", "a"]),
    ("plan ratio outside (0, 1)", ["compile", "model.onnx", "--pair", "cpu-pair", "--plan",
                                   "bad-ratio.json", "-o", "a"]),
    ("plan candidate with a bad label", ["compile", "model.onnx", "--pair", "cpu-pair",
                                         "--plan", "bad-candidate.json", "--guard", "-o", "a"]),
    ("output is the working directory", ["compile", "model.onnx", "--pair", "cpu-pair",
                                         "-o", "."]),
    ("output is a parent folder", ["compile", "model.onnx", "--pair", "cpu-pair", "-o", ".."]),
    ("output folder holds the user's files", ["compile", "model.onnx", "--pair", "cpu-pair",
                                              "-o", "data"]),
    ("output artifact exists, no --overwrite", ["compile", "model.onnx", "--pair", "cpu-pair",
                                                "-o", "art"]),
    ("output file is the model", ["plan", "model.onnx", "--pair", "cpu-pair", "--strategy",
                                  "gpu-only", "-o", "model.onnx"]),
    ("output file is a folder", ["plan", "model.onnx", "--pair", "cpu-pair", "--strategy",
                                 "gpu-only", "-o", "data"]),
    ("predictor of an unknown version", ["plan", "model.onnx", "--pair", "cpu-pair",
                                         "--predictor", "bad-predictor.json", "-o", "p.json"]),
    ("samples file malformed", ["train", "bad-samples.csv", "-o", "pred.json"]),
    ("train output is its samples", ["train", "bad-samples.csv", "-o", "bad-samples.csv"]),
    ("artifact folder is not one", ["run", "data"]),
    ("inputs lack the model's input", ["run", "art", "--inputs", "wrong-inputs.npz"]),
    ("input of the wrong shape", ["run", "art", "--inputs", "wrong-shape.npz"]),
    ("run output is its inputs", ["run", "art", "--inputs", "x.npz", "-o", "x.npz"]),
    ("explain: plan of another model", ["explain", "vgg-16", "--pair", "cpu-pair", "--plan",
                                        "plan.json"]),
]


def try_case(argv: list[str]) -> tuple[int, str]:
    from codl_tvm.cli import main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as stop:  # argparse
            code = stop.code if isinstance(stop.code, int) else 1
    lines = [line for line in err.getvalue().splitlines() if line.strip()
             and not line.startswith(("bundle:", "  "))]
    return code, lines[-1] if lines else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-o", "--output", default=str(ROOT / "docs" / "BAD_INPUT.md"))
    args = parser.parse_args()
    import warnings

    warnings.simplefilter("ignore")
    rows = []
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "project"
        d.mkdir()
        os.chdir(d)
        try:
            project(d)
            outside = snapshot(Path(tmp))
            for what, argv in CASES:
                before = snapshot(d)
                code, message = try_case(argv)
                same = snapshot(d) == before and snapshot(Path(tmp)) == outside
                rows.append((what, " ".join(argv), code, message, same))
                print(f"{code}  {'unchanged' if same else 'CHANGED'}  {what}: {message}")
        finally:
            os.chdir(cwd)
    from codl_tvm.outputs import write_text

    table = ["| bad input | command | exit | message | folder unchanged |",
             "|---|---|---:|---|---|"]
    for what, cmd, code, message, same in rows:
        message = message.replace("|", "\\|").replace(str(Path(tmp)), "TMP")
        table.append(f"| {what} | `codl-tvm {cmd}` | {code} | {message} | "
                     f"{'yes' if same else '**no**'} |")
    ok = sum(1 for r in rows if r[2] == 1 and r[4])
    write_text(args.output, f"""# Bad input

Every class of bad input the command line takes, tried in a scratch project folder (a model,
a plan, an artifact, the user's notes and data). Each must give one line naming the problem,
exit code 1, and leave every file in the folder, and beside it, as it was. This table is made
by `python benchmarks/bad_input_table.py`; {ok} of {len(rows)} cases meet all three.

{chr(10).join(table)}
""")


if __name__ == "__main__":
    main()
