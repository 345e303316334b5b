"""``calibrate``: the shipped predictor scaled to the speed of the machine at hand."""

from __future__ import annotations

import csv
import json
import warnings

import pytest

from codl_tvm.cli import main
from codl_tvm.predictor import DATA_DIR, PredictorFileError, load
from codl_tvm.predictor.base import sub_spec
from codl_tvm.predictor.opspec import SHARING_KINDS, OpSpec
from codl_tvm.profiler import COLUMNS, read_samples

SAMPLES = DATA_DIR / "samples-x86-cuda-h100.csv"
PREDICTOR = DATA_DIR / "predictor-x86-cuda.json"


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return [r for r in read_samples(SAMPLES) if r["op"] not in SHARING_KINDS][::40]


def _slower(rows: list[dict], factor: dict[str, float]) -> list[dict]:
    """The rows as a machine ``factor`` times as slow as the predictor would measure them."""
    pred = load(PREDICTOR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = pred.predict(rows)
    return [dict(r, latency_us=float(p) * factor[r["role"]]) for r, p in zip(rows, base)]


def test_calibrate_finds_each_processors_speed_and_replaces_it(rows) -> None:
    pred = load(PREDICTOR)
    op = OpSpec("conv2d", 56, 56, 64, 64, 3, 3, 1, 1, (1, 1, 1, 1))
    before = {role: pred.kernel_us(role, op) for role in ("cpu", "gpu")}
    assert pred.calibrate(_slower(rows, {"cpu": 0.5, "gpu": 1.25})) is pred
    assert pred.speed_ == pytest.approx({"cpu": 0.5, "gpu": 1.25})
    assert pred.kernel_us("cpu", op) == pytest.approx(0.5 * before["cpu"])
    assert pred.kernel_us("gpu", op) == pytest.approx(1.25 * before["gpu"])
    pred.calibrate(_slower(rows, {"cpu": 2.0, "gpu": 1.0}))  # again: replaced, not compounded
    assert pred.speed_ == pytest.approx({"cpu": 2.0, "gpu": 1.0})
    sharing = pred.predict_op(op, "H", 0.5)["share_us"]
    assert sharing == load(PREDICTOR).predict_op(op, "H", 0.5)["share_us"]  # not scaled


def test_the_speed_factor_is_the_one_the_long_ops_agree_on(rows) -> None:
    """A machine that runs short ops faster and long ops slower than predicted: the factor is
    the long ops', as a plan's latency (a sum of op times) needs; a plain median would take
    the many short ops' (regression: 0.82 on the GPU machine's CPU, whole models 1.2-2x slow)."""
    pred = load(PREDICTOR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = pred.predict(rows)
    long = set()
    for role in ("cpu", "gpu"):  # per processor, the longest 30% of its rows
        mine = sorted((p, i) for i, (r, p) in enumerate(zip(rows, base)) if r["role"] == role)
        long |= {i for _, i in mine[int(0.7 * len(mine)):]}
        assert sum(p for p, i in mine if i in long) > sum(p for p, _ in mine) / 2
    skewed = [dict(r, latency_us=float(p) * (1.1 if i in long else 0.7))
              for i, (r, p) in enumerate(zip(rows, base))]  # fmt: skip
    pred.calibrate(skewed, gpu_passes=False)  # the passes have a test of their own
    assert pred.speed_["cpu"] == pytest.approx(1.1)
    assert pred.speed_["gpu"] == pytest.approx(1.1)
    plain = load(PREDICTOR).calibrate(skewed, gpu_passes=False, time_weighted=False)
    assert plain.speed_ == pytest.approx({"cpu": 0.7, "gpu": 0.7})  # --equal-weights


def test_calibration_travels_in_the_file_and_the_default_has_none(rows, tmp_path) -> None:
    assert "speed" not in json.loads(PREDICTOR.read_text())
    pred = load(PREDICTOR).calibrate(_slower(rows, {"cpu": 0.6, "gpu": 1.1}))
    pred.save(tmp_path / "p.json")
    back = load(tmp_path / "p.json")
    assert back.speed_ == pytest.approx({"cpu": 0.6, "gpu": 1.1}, rel=1e-6)
    bad = json.loads((tmp_path / "p.json").read_text())
    bad["speed"]["cpu"] = -1.0
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(PredictorFileError, match="speed"):
        load(tmp_path / "bad.json")


def test_calibrate_refuses_too_few_or_foreign_samples(rows) -> None:
    pred = load(PREDICTOR)
    cpu = [r for r in rows if r["role"] == "cpu"]
    with pytest.raises(ValueError, match=">= 3 compute samples of cpu"):
        pred.calibrate(cpu[:2])
    with pytest.raises(ValueError, match="pair 'x86-cuda'"):
        pred.calibrate([dict(r, pair="cpu-pair") for r in cpu])
    assert getattr(pred, "speed_", {}) == {}


def test_cli_calibrate_writes_the_file_or_nothing(rows, tmp_path, capsys) -> None:
    fresh = _slower(rows, {"cpu": 0.8, "gpu": 0.9})
    path = tmp_path / "fresh.csv"
    cols = list(COLUMNS)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, cols, extrasaction="ignore")
        w.writeheader()
        for r in fresh:
            w.writerow({**r, "round_us": ";".join(map(str, r["round_us"]))})
    out = tmp_path / "cal.json"
    assert main(["calibrate", str(PREDICTOR), str(path), "-o", str(out)]) == 0
    assert load(out).speed_ == pytest.approx({"cpu": 0.8, "gpu": 0.9}, rel=1e-6)
    broken = tmp_path / "broken.csv"
    broken.write_text("pair,role\nx86-cuda,cpu\n")
    assert main(["calibrate", str(PREDICTOR), str(broken), "-o", str(tmp_path / "x.json")]) == 1
    assert not (tmp_path / "x.json").exists()
    assert "missing columns" in capsys.readouterr().err


def _sharing_rows(a_us: float, us_per_byte: float) -> list[dict]:
    """Copy samples of a bus costing ``a_us + us_per_byte * bytes`` each way."""
    base = next(r for r in read_samples(SAMPLES) if r["op"] == "to_gpu")
    out = []
    for op in ("to_gpu", "to_cpu"):
        for nbytes in (4096, 65536, 1 << 20, 4 << 20, 16 << 20):
            out.append(dict(base, op=op, role="gpu" if op == "to_gpu" else "cpu",
                            bytes=nbytes, latency_us=a_us + us_per_byte * nbytes))
    return out


def test_calibration_refits_the_copies_it_has_samples_of(rows) -> None:
    pred = load(PREDICTOR)
    old = dict(pred.sharing_.params)
    pred.calibrate(_slower(rows, {"cpu": 1.0, "gpu": 1.0}) + _sharing_rows(8.0, 2e-5))
    for op in ("to_gpu", "to_cpu"):
        assert pred.sharing_.cost(op, "gpu", 1 << 20) == pytest.approx(8.0 + 2e-5 * (1 << 20))
    # ops without samples keep the trained fit
    assert pred.sharing_.params["sync_us"] == old["sync_us"]
    assert pred.sharing_.params["concat_gpu"] == old["concat_gpu"]


def test_detected_sms_spread_the_gpu_waves_and_travel_in_the_file(rows, tmp_path) -> None:
    """A GPU that MPS holds to 8 SMs: a grid of many waves takes longer in proportion, a grid
    of a few blocks does not, and the kernels stay the ones tiled for the arch's SMs."""
    pred, full, eight = load(PREDICTOR), load(PREDICTOR), load(PREDICTOR)
    eight._use_machine({"gpu_sms": 8})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same = [dict(r, latency_us=float(p)) for r, p in zip(rows, eight.predict(rows))]
    pred.calibrate(same, machine={"gpu_sms": 8, "gpu_name": "H100"})
    assert pred.speed_.get("gpu") == pytest.approx(1.0)  # the samples of an 8-SM GPU
    assert pred.machine_.run_sms == 8 and pred.machine_.sms == full.machine_.sms
    big = OpSpec("conv2d", 104, 104, 128, 128, 3, 3, 1, 1, (1, 1, 1, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert pred.kernel_us("gpu", big) > 4 * full.kernel_us("gpu", big)
        assert pred.kernel_us("cpu", big) == pytest.approx(full.kernel_us("cpu", big))
    pred.save(tmp_path / "p.json")
    assert load(tmp_path / "p.json").machine_ == pred.machine_
    pred.calibrate(same, machine={"gpu_sms": full.machine_.sms})  # all SMs again
    assert pred.machine_ == full.machine_


def test_cli_takes_the_facts_the_profiler_wrote_beside_the_samples(rows, tmp_path) -> None:
    samples = tmp_path / "s.csv"
    with open(samples, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(_slower(rows, {"cpu": 1.0, "gpu": 1.0}))
    (tmp_path / "s.machine.json").write_text(json.dumps({"gpu_sms": 8}))
    assert main(["calibrate", str(PREDICTOR), str(samples), "-o", str(tmp_path / "c.json")]) == 0
    assert load(tmp_path / "c.json").machine_.run_sms == 8


def test_calibrate_finds_how_slow_the_gpus_memory_passes_run(rows, tmp_path) -> None:
    """A GPU whose memory passes run 4x as long (a few SMs pulling the bytes) and whose other
    work runs 1.1x: calibration finds both factors; the passes' factor prices a Winograd conv
    (its transforms are passes) up and leaves the CPU as it was."""
    truth = load(PREDICTOR)
    truth.speed_ = {"gpu-passes": 4.0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        slow = [dict(r, latency_us=float(p) * (1.1 if r["role"] == "gpu" else 1.0))
                for r, p in zip(rows, truth.predict(rows))]
    pred = load(PREDICTOR).calibrate(slow)
    assert pred.speed_ == pytest.approx({"cpu": 1.0, "gpu": 1.1, "gpu-passes": 4.0})
    plain = load(PREDICTOR)
    conv = OpSpec("conv2d", 52, 52, 128, 256, 3, 3, 1, 1, (1, 1, 1, 1))
    assert pred.algorithm("gpu", conv) == "gpu-winograd-2x2-3x3"
    assert pred.kernel_us("gpu", conv) > 1.5 * 1.1 * plain.kernel_us("gpu", conv)
    assert pred.kernel_us("cpu", conv) == pytest.approx(plain.kernel_us("cpu", conv))
    pred.save(tmp_path / "p.json")
    assert load(tmp_path / "p.json").speed_ == pytest.approx(pred.speed_, rel=1e-6)
    # the machine the terms were fitted on: its own samples need no factor for the passes
    assert "gpu-passes" not in load(PREDICTOR).calibrate(_slower(rows, {"cpu": 1, "gpu": 1})).speed_


def test_the_pass_factor_scales_the_memory_passes_and_nothing_else() -> None:
    """The pass terms are named (``gpu_passes.GPU_PASS_TERMS``): a term added to a GPU model
    shifts no column the factor scales."""
    from codl_tvm.predictor.blocking import TERM_NAMES, terms
    from codl_tvm.predictor.gpu_passes import GPU_PASS_TERMS, scale_passes
    from codl_tvm.predictor.machine import reference

    specs = {"gpu-conv-tiled": OpSpec("conv2d", 26, 26, 256, 512, 3, 3, pad=(1, 1, 1, 1)),
             "gpu-winograd-2x2-3x3": OpSpec("conv2d", 52, 52, 128, 256, 3, 3, pad=(1,) * 4),
             "pool": OpSpec("pool_max", 104, 104, 64, 64, 2, 2, 2, 2),
             "elementwise": OpSpec("elementwise", 416, 416, 64, 64, 1, 1)}  # fmt: skip
    assert set(specs) == set(GPU_PASS_TERMS)
    for algo, spec in specs.items():
        before = terms("gpu", spec, reference(), algo)
        after = scale_passes(list(before), algo, 3.0)
        names = TERM_NAMES[("gpu", algo)]
        for name, b, a in zip(names, before, after, strict=True):
            assert a == pytest.approx(3.0 * b if name in GPU_PASS_TERMS[algo] else b), name
        assert any(a != b for a, b in zip(before, after)), algo


def test_per_kernel_factors_carry_a_kernel_priced_one_factor_off(rows) -> None:
    """One kernel of the target runs 3x its price on every shape, the rest as priced: one
    factor per processor cannot carry it, a factor per kernel can; calibrating again
    replaces the factors."""
    pred = load(PREDICTOR)
    key = lambda r: pred._factor_key(r["role"], sub_spec(r), r["algorithm"])  # noqa: E731
    counts: dict[str, int] = {}
    for r in rows:
        counts[key(r)] = counts.get(key(r), 0) + 1
    off = max((k for k in counts if k.startswith("cpu/")), key=counts.get)
    assert counts[off] >= 10
    measured = [dict(r, latency_us=r["latency_us"] * (3.0 if key(r) == off else 1.0))
                for r in _slower(rows, {"cpu": 1.0, "gpu": 1.0})]
    pred.calibrate(measured, gpu_passes=False, per_kernel=True)
    assert pred.speed_[off] * pred.speed_["cpu"] == pytest.approx(3.0, rel=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ratio = [m["latency_us"] / p for m, p in zip(measured, pred.predict(measured))]
    assert ratio == pytest.approx([1.0] * len(ratio), rel=1e-3)
    pred.calibrate(_slower(rows, {"cpu": 1.0, "gpu": 1.0}), gpu_passes=False)
    assert set(pred.speed_) == {"cpu", "gpu"}
    saved = load(PREDICTOR).calibrate(measured, gpu_passes=False, per_kernel=True)
    assert type(saved).from_json(saved.to_json()).speed_ == saved.speed_
