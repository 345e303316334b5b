"""The ``codl-tvm`` command line, through subprocesses as a user runs it: every command's help,
its work on small inputs, and its error paths (exit code 1 and one line naming the problem)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import codl_tvm
from codl_tvm import zoo
from codl_tvm.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def env(extra_path: str | None = None) -> dict[str, str]:
    paths = [p for p in (extra_path, str(ROOT), os.environ.get("PYTHONPATH")) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def cli(*args: str, extra_path: str | None = None, timeout: int = 300):
    return subprocess.run([sys.executable, "-m", "codl_tvm.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout,
                          env=env(extra_path))  # fmt: skip


def cli_many(*calls: list) -> list[subprocess.CompletedProcess]:
    """Several CLI calls at once (each pays the interpreter and TVM start-up)."""
    procs = [subprocess.Popen([sys.executable, "-m", "codl_tvm.cli", *map(str, args)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env()) for args in calls]  # fmt: skip
    done = []
    for args, proc in zip(calls, procs):
        out, err = proc.communicate(timeout=300)
        done.append(subprocess.CompletedProcess(args, proc.returncode, out, err))
    return done


def user_error(proc, *words: str) -> str:
    """Exit code 1, one line on stderr naming the problem, no traceback."""
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def commands() -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return list(sub.choices)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """tiny-cnn's ONNX file, plans for it, a broken plan and a broken predictor."""
    d = tmp_path_factory.mktemp("cli")
    model = zoo.get("tiny-cnn")
    mod = codl_tvm.load_model(model)
    codl_tvm.Plan.uniform(mod, "H", 0.5, chain=True).save(d / "plan.json")
    doc = codl_tvm.Plan.uniform(mod, "OC", 0.5).to_json()
    doc["ops"]["conv2d_99"] = {"place": "cpu"}
    (d / "unknown_op.json").write_text(json.dumps(doc))
    (d / "broken.json").write_text('{"format": "codl-tvm-plan", "version": 1, "ops": ')
    (d / "broken_predictor.json").write_text(json.dumps({"kind": "codl", "version": 1}))
    return {"dir": d, "model": model}


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    """Really measured samples of tiny-cnn's ops on cpu-pair (a few seconds)."""
    from codl_tvm.explain import model_op_specs
    from codl_tvm.profiler import profile, space

    path = tmp_path_factory.mktemp("samples") / "samples.csv"
    specs = model_op_specs(codl_tvm.load_model(zoo.get("tiny-cnn")), "tiny-cnn")
    jobs = space.compute_jobs(specs, (0.5, 1.0)) + space.sharing_jobs(4, 1 << 20)
    profile("cpu-pair", path, jobs=jobs, progress=False)
    return path


HELP_DRIVER = """
import contextlib, io, json, sys
from codl_tvm.cli import main
out = {}
for name in sys.argv[1:]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            main([name, "--help"])
            code = None
        except SystemExit as stop:
            code = stop.code
    out[name] = [code, buf.getvalue()]
print(json.dumps(out))
"""


def test_help_of_every_command():
    names = commands()
    assert {"demo", "compile", "run", "profile", "train", "report", "explain"} <= set(names)
    # one interpreter for all of them: `codl-tvm NAME --help` is argparse's job in main()
    proc = subprocess.run([sys.executable, "-c", HELP_DRIVER, *names], capture_output=True,
                          text=True, timeout=120, env=env())  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for name, (code, text) in json.loads(proc.stdout).items():
        assert code == 0 and f"usage: codl-tvm {name}" in text, (name, code, text)


def test_top_level_help_lists_commands():
    proc = cli("--help")
    assert proc.returncode == 0
    for name in commands():
        assert name in proc.stdout


def test_demo_checks_the_split_model():
    proc = cli("demo", "--pair", "cpu-pair", "--ratio", "0.3")
    assert proc.returncode == 0, proc.stderr
    assert "[OK]" in proc.stdout and "conv2d_0" in proc.stdout


def test_compile_and_run_match_the_unsplit_model(work):
    d = work["dir"]
    proc = cli("compile", work["model"], "--pair", "cpu-pair", "--plan", d / "plan.json",
               "-o", d / "art")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype("float32")
    np.savez(d / "x.npz", input=x)
    proc = cli("run", d / "art", "--inputs", d / "x.npz", "-o", d / "y.npz")
    assert proc.returncode == 0, proc.stderr
    (out,) = np.load(d / "y.npz").values()
    ref = codl_tvm.compile(codl_tvm.load_model(work["model"]),
                           codl_tvm.DevicePair.preset("cpu-pair")).run({"input": x})[0]
    assert np.linalg.norm(out - ref) <= 1e-5 * np.linalg.norm(ref)


def test_compile_options_are_recorded_in_the_manifest(work):
    d = work["dir"]
    proc = cli("compile", work["model"], "--pair", "cpu-pair", "--no-fuse", "--cuda-graph",
               "-o", d / "plain")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((d / "plain" / "manifest.json").read_text())
    assert manifest["fused"] is False
    assert manifest["cuda_graph"] is False  # the cpu-pair's GPU role is no CUDA GPU


def test_compile_and_run_errors(work):
    d = work["dir"]
    base = ["compile", work["model"], "--pair", "cpu-pair", "-o", d / "never"]
    missing, broken, unknown, shape, run = cli_many(
        ["compile", d / "missing.onnx", "--pair", "cpu-pair", "-o", d / "x"],
        [*base, "--plan", d / "broken.json"],
        [*base, "--plan", d / "unknown_op.json"],
        [*base, "--shape", "input=1,3,x"],
        ["run", d / "no-such-artifact"],
    )
    user_error(missing, "missing.onnx", "does not exist")
    user_error(broken, "not valid JSON")
    user_error(unknown, "unknown op", "conv2d_99")
    user_error(shape, "NAME=D1,D2")
    user_error(run, "no-such-artifact")
    assert not (d / "never").exists()


def test_train_report_explain_with_a_measured_predictor(work, samples, tmp_path):
    pred = tmp_path / "pred.json"
    proc = cli("train", samples, "-o", pred)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["pair"] == "cpu-pair"
    proc = cli("report", pred, samples)
    assert proc.returncode == 0 and "MAPE" in proc.stdout, proc.stderr
    proc = cli("explain", work["model"], "--plan", work["dir"] / "plan.json", "--predictor",
               pred, "--png", tmp_path / "t.png")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for word in ("conv2d_0", "share_us", "predicted by the codl predictor", "CPU only"):
        assert word in proc.stdout
    if importlib.util.find_spec("matplotlib"):
        assert (tmp_path / "t.png").stat().st_size > 10_000


def test_predictor_errors(work, samples, tmp_path):
    broken = work["dir"] / "broken_predictor.json"
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_text("op,role\nconv2d,gpu\n")
    report, explain, train_bad, train_missing, profile = cli_many(
        ["report", broken, samples],
        ["explain", "tiny-cnn", "--plan", work["dir"] / "plan.json", "--predictor", broken],
        ["train", bad_csv, "-o", tmp_path / "p.json"],
        ["train", tmp_path / "none.csv", "-o", tmp_path / "p.json"],
        ["profile", "--pair", "no-such-pair", "-o", tmp_path / "s.csv"],
    )
    user_error(report, "broken_predictor.json", "malformed")
    user_error(explain, "broken_predictor.json")
    user_error(train_bad, "bad.csv")
    user_error(train_missing, "none.csv")
    user_error(profile, "no-such-pair")
    assert not (tmp_path / "p.json").exists()


def test_explain_placeholder_table_and_batch(work):
    proc = cli("explain", "tiny-cnn", "--plan", work["dir"] / "plan.json", "--pair", "cpu-pair",
               "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert "PLACEHOLDER" in doc["source"] and len(doc["rows"]) == 6
    proc = cli("explain", work["model"], "--plan", work["dir"] / "plan.json", "--batch", "2")
    user_error(proc, "different model")  # the plan was made for batch 1


def test_explain_without_matplotlib_prints_the_table(work, tmp_path):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "matplotlib.py").write_text("raise ImportError('matplotlib blocked by the test')\n")
    proc = cli("explain", "tiny-cnn", "--plan", work["dir"] / "plan.json", "--png",
               tmp_path / "t.png", extra_path=str(shim))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "conv2d_0" in proc.stdout and "matplotlib is not installed" in proc.stderr
    assert not (tmp_path / "t.png").exists()


def test_explain_errors(work):
    d = work["dir"]
    name, gone, broken, unknown = cli_many(
        ["explain", "no-such-model", "--plan", d / "plan.json"],
        ["explain", d / "gone.onnx", "--plan", d / "plan.json"],
        ["explain", "tiny-cnn", "--plan", d / "broken.json"],
        ["explain", "tiny-cnn", "--plan", d / "unknown_op.json"],
    )
    user_error(name, "no-such-model", "not a zoo model")
    user_error(gone, "gone.onnx", "does not exist")
    user_error(broken, "not valid JSON")
    user_error(unknown, "unknown op", "conv2d_99")


def test_plan_and_bench(work, tmp_path):
    plan = tmp_path / "plan.json"
    made, gone, capped = cli_many(
        ["plan", work["model"], "--pair", "cpu-pair", "--strategy", "gpu-only", "-o", plan],
        ["plan", work["dir"] / "gone.onnx", "--pair", "cpu-pair", "-o", tmp_path / "p2.json"],
        ["plan", work["model"], "--pair", "cpu-pair", "--memory-cap", "0.5",
         "-o", tmp_path / "p3.json"],
    )
    assert made.returncode == 0, made.stderr
    codl_tvm.Plan.load(plan).validate(codl_tvm.load_model(work["model"]))
    user_error(gone, "gone.onnx")
    user_error(capped, "--memory-cap", "at least 1")
    assert not (tmp_path / "p3.json").exists()
    assert "bench" in commands()


def test_predictor_module_reports_a_broken_predictor_in_one_line(tmp_path):
    """`python -m codl_tvm.predictor report` on a malformed file:
    one error line naming the file and exit 1, as `codl-tvm report` does."""
    from codl_tvm.predictor import DATA_DIR

    doc = json.loads((DATA_DIR / "predictor-x86-cuda.json").read_text())
    doc["model"]["machine"][-1] = "lots"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    proc = subprocess.run([sys.executable, "-m", "codl_tvm.predictor", "report", str(bad),
                           str(DATA_DIR / "samples-x86-cuda-h100.csv")],
                          capture_output=True, text=True, timeout=120, env=env())
    assert proc.returncode == 1
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "bad.json" in err[0] and "malformed codl predictor" in err[0]


def test_every_model_command_takes_a_zoo_name(tmp_path, capsys):
    """compile resolves MODEL as plan and explain do: an ONNX file or a zoo name."""
    from codl_tvm.cli import main as cli_main

    assert cli_main(["compile", "tiny-cnn", "--pair", "cpu-pair", "-o", str(tmp_path / "a")]) == 0
    assert (tmp_path / "a" / "lib.so").exists()
    assert cli_main(["compile", "no-such-model", "--pair", "cpu-pair", "-o",
                     str(tmp_path / "b")]) == 1
    assert "not a zoo model" in capsys.readouterr().err


def test_every_model_command_takes_the_same_model_flags():
    """One model resolver (codl_tvm.zoo.load): MODEL and its shape flags are the same on every
    command that loads a model."""
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name in ("compile", "plan", "bench", "explain"):
        flags = {s for a in sub.choices[name]._actions for s in a.option_strings}
        assert {"--batch", "--input-shape", "--shape"} <= flags, name
        assert any(a.dest == "model" for a in sub.choices[name]._actions), name


def test_module_entry_points_share_the_commands():
    """`python -m codl_tvm.profiler|predictor` offer codl-tvm's own commands (no parser of
    their own)."""
    from codl_tvm.cli import COMMANDS
    from codl_tvm.commands import predictor, profile

    assert set(predictor.MODULE_COMMANDS.values()) <= set(COMMANDS.values())
    assert set(profile.MODULE_COMMANDS.values()) <= set(COMMANDS.values())
    assert set(profile.MODULE_COMMANDS) == {"profile", "bundle", "join", "noise", "resummarize"}
    for package, names in (("profiler", profile.MODULE_COMMANDS),
                           ("predictor", predictor.MODULE_COMMANDS)):
        proc = subprocess.run([sys.executable, "-m", f"codl_tvm.{package}", "--help"],
                              capture_output=True, text=True, timeout=120, env=env())
        assert proc.returncode == 0 and f"python -m codl_tvm.{package}" in proc.stdout
        assert all(name in proc.stdout for name in names), package


def test_a_library_warning_is_one_line_under_the_cli(tmp_path, capsys):
    """Python warnings (here: training on samples without machine facts beside them) print as
    the commands' own warnings do, one ``warning:`` line, not a file, line and source line."""
    from codl_tvm.cli import main
    from codl_tvm.predictor import DATA_DIR

    samples = tmp_path / "s.csv"
    samples.write_text((DATA_DIR / "samples-x86-cuda-h100.csv").read_text())
    assert main(["train", str(samples), "-o", str(tmp_path / "p.json")]) == 0
    err = capsys.readouterr().err.splitlines()
    facts = [line for line in err if "machine facts" in line]
    assert len(facts) == 1 and facts[0].startswith("warning: the samples' machine facts")
    assert not any("MachineFactWarning" in line or "self.machine_" in line for line in err)
