"""The pass contract: Blocking records, dispatch, composability, untouched funcs."""

from __future__ import annotations

import pytest
import tvm

from codl_tvm.schedules import RULES, ApplySchedules, Blocking, blocking_of
from codl_tvm.schedules import testing as T
from codl_tvm.schedules.target_info import target_info


def _blocking() -> Blocking:
    return Blocking(
        algorithm="direct-nchwc", processor="cpu", op="conv2d", output_size=1000,
        block_shape={"oc": 32, "h": 1, "w": 8}, basic_unit_shape={"oc": 16, "w": 1},
        num_blocks=32, cores=4, vector_lanes=16,
    )


def test_blocking_json_round_trip_and_eq3():
    b = _blocking()
    assert Blocking.from_json(b.to_json()) == b
    # ceil(1000 / (256 * 4)) * ceil(256 / 16)
    assert b.eq3_steps() == 1 * 16
    assert b.eq3_steps(cores=1) == 4 * 16


def test_blocking_rejects_garbage():
    with pytest.raises(ValueError, match="codl.blocking"):
        Blocking.from_json('{"algorithm": 1}')


def test_funcs_without_target_are_left_alone():
    func = T.conv2d_func((1, 3, 5, 5), (4, 3, 3, 3))
    mod = ApplySchedules()(tvm.IRModule({"main": func}))
    assert blocking_of(mod["main"]) is None
    assert mod["main"].same_as(func)


def test_composable_in_sequential_and_idempotent():
    func = T.with_target(T.conv2d_func((1, 3, 5, 5), (4, 3, 3, 3)), T.CPU_TARGET)
    seq = tvm.transform.Sequential([ApplySchedules(), ApplySchedules()])
    out = seq(tvm.IRModule({"main": func}))["main"]
    assert blocking_of(out).rule == "cpu-conv2d-direct-nchwc"


def test_unknown_op_falls_back_with_record():
    # softmax has no rule: CPU plain/DLight, GPU DLight, both recorded
    from tvm import relax
    from tvm.relax import op as rop

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 33), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(rop.nn.softmax(x)))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(bb.get())
    func = [f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)][0]
    cuda = tvm.target.Target({"kind": "cuda", "arch": "sm_90"}, host={"kind": "llvm"})
    gpu = T.schedule(func, cuda)
    assert blocking_of(gpu).processor == "gpu"
    T.build(gpu, cuda)
    assert blocking_of(T.schedule(func, T.CPU_TARGET)) is not None


@pytest.mark.parametrize(
    "target, lanes",
    [
        ({"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 16}, 16),
        ({"kind": "llvm", "mcpu": "haswell"}, 8),
        ({"kind": "llvm", "mtriple": "aarch64-linux-android", "mattr": ["+neon"]}, 4),
    ],
)
def test_vector_width_from_target(target, lanes):
    t = tvm.target.Target(target)
    assert target_info(t).lanes == lanes
    func = T.schedule(T.conv2d_func((1, 3, 5, 9), (20, 3, 3, 3), padding=1), t)
    assert blocking_of(func).vector_lanes == lanes
    T.build(func, t)  # aarch64: cross-compiled object only


def test_dispatch_table_is_data():
    families = {(r.family, op) for r in RULES for op in r.ops}
    for op in ("conv2d", "depthwise_conv2d", "pool2d", "matmul"):
        assert ("cpu", op) in families and ("gpu", op) in families
