"""Where a split's time goes (benchmarks/split_breakdown.py): every VM call of a real split on
the cpu-pair is sorted into its kind, the kernels by the device their names end in, so the
CPU part's kernel inside the split is told from the GPU part's."""

from __future__ import annotations

import warnings

from tests.helpers import load_benchmark


def test_a_splits_calls_fall_into_their_kinds(tmp_path):
    import codl_tvm
    from codl_tvm import runtime

    bd = load_benchmark("split_breakdown")
    coexec = load_benchmark("coexec_conv")
    shape = {"h": 10, "w": 9, "ic": 8, "oc": 16, "kh": 1, "kw": 1, "sh": 1, "sw": 1}
    mod = codl_tvm.load_model(coexec.conv_module(shape))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exe = codl_tvm.compile(mod, codl_tvm.DevicePair.preset("cpu-pair"),
                               codl_tvm.Plan.uniform(mod, "H", 0.7), block_copies=True)
    exe.export(tmp_path / "split", weights=False)
    r = runtime.load(tmp_path / "split")
    got = bd.instrumented(r, r.random_inputs(seed=1), runs=3)
    kinds = {n: bd.call_kind(n) for n in got["calls"]}
    assert sorted(n for n, k in kinds.items() if k.endswith("kernel")) == sorted(
        n for n in got["calls"] if "conv2d" in n)
    assert sum(k == "cpu-kernel" for k in kinds.values()) == 1
    assert sum(k == "gpu-kernel" for k in kinds.values()) == 1
    assert kinds["codl.copy_block"] == "copy"
    assert kinds["vm.builtin.match_shape"] == "vm"
    by_kind = bd.calls_by_kind(got["calls"])
    assert by_kind["cpu-kernel"] > 0 and by_kind["gpu-kernel"] > 0
    assert got["wall_us"] >= max(by_kind.values())
