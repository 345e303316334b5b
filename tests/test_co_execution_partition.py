"""CoExecutionPartition: TVMScript Before/Expected for each kind of rewrite."""

from __future__ import annotations

import pytest
import tvm
from tvm.script import ir as I
from tvm.script import relax as R

from codl_tvm import Chain, CoExecutionPartition, DevicePair, OpPlacement, Plan, PlanError

# GPU role = llvm device 1 (vdevice 0), CPU role = llvm device 0 (vdevice 1)
PAIR = DevicePair("test", {"kind": "llvm"}, {"kind": "llvm"}, cpu_index=0, gpu_index=1)
VDEVICES = {"vdevice": [I.vdevice({"kind": "llvm"}, 1, "global"),
                        I.vdevice({"kind": "llvm"}, 0, "global")]}


def _run(before: tvm.IRModule, plan: Plan) -> tvm.IRModule:
    return CoExecutionPartition(plan, PAIR)(before)


@I.ir_module
class Conv:
    @R.function
    def main(x: R.Tensor((1, 4, 8, 8), "float32"), w: R.Tensor((6, 4, 3, 3), "float32")):
        with R.dataflow():
            y = R.nn.conv2d(x, w, padding=[1, 1, 1, 1])
            R.output(y)
        return y


def test_h_split_reads_halo_rows_and_pads_only_true_borders():
    @I.ir_module
    class Expected:
        I.module_global_infos(VDEVICES)

        @R.function
        def main(
            x: R.Tensor((1, 4, 8, 8), "float32", "llvm:0"),
            w: R.Tensor((6, 4, 3, 3), "float32", "llvm:0"),
        ):
            with R.dataflow():
                # CPU rows 4-7 read rows 3-7 (one halo row above; bottom: true padding)
                lv1 = R.strided_slice(x, (2,), (3,), (8,))
                lv2 = R.to_vdevice(lv1, "llvm:1")
                lv3 = R.to_vdevice(w, "llvm:1")
                # GPU rows 0-3 read input rows 0-4 (top: true zero padding)
                lv = R.strided_slice(x, (2,), (0,), (5,))
                lv4 = R.nn.conv2d(lv, w, padding=[1, 1, 0, 1])
                lv5 = R.nn.conv2d(lv2, lv3, padding=[0, 1, 1, 1])
                lv6 = R.to_vdevice(lv5, "llvm:0")
                y = R.concat((lv4, lv6), axis=2)
                R.output(y)
            return y

    plan = Plan(ops={"conv2d_0": OpPlacement("split", "H", 0.5)})
    tvm.ir.assert_structural_equal(_run(Conv, plan), Expected)


def test_oc_split_shares_the_input_and_slices_weights():
    @I.ir_module
    class Expected:
        I.module_global_infos(VDEVICES)

        @R.function
        def main(
            x: R.Tensor((1, 4, 8, 8), "float32", "llvm:0"),
            w: R.Tensor((6, 4, 3, 3), "float32", "llvm:0"),
        ):
            with R.dataflow():
                lv = R.to_vdevice(x, "llvm:1")
                lv1 = R.to_vdevice(w, "llvm:1")
                lv2 = R.strided_slice(w, (0,), (0,), (3,))
                lv3 = R.nn.conv2d(x, lv2, padding=[1, 1, 1, 1])
                lv4 = R.strided_slice(lv1, (0,), (3,), (6,))
                lv5 = R.nn.conv2d(lv, lv4, padding=[1, 1, 1, 1])
                lv6 = R.to_vdevice(lv5, "llvm:0")
                y = R.concat((lv3, lv6), axis=1)
                R.output(y)
            return y

    plan = Plan(ops={"conv2d_0": OpPlacement("split", "OC", 0.5)})
    tvm.ir.assert_structural_equal(_run(Conv, plan), Expected)


@I.ir_module
class ConvConvPool:
    @R.function
    def main(
        x: R.Tensor((1, 2, 8, 8), "float32"),
        w1: R.Tensor((4, 2, 3, 3), "float32"),
        w2: R.Tensor((4, 4, 3, 3), "float32"),
    ):
        with R.dataflow():
            a = R.nn.conv2d(x, w1, padding=[1, 1, 1, 1])
            b = R.nn.conv2d(a, w2, padding=[1, 1, 1, 1])
            y = R.nn.max_pool2d(b, pool_size=[2, 2], strides=[2, 2])
            R.output(y)
        return y


def test_h_chain_propagates_halos_to_the_head_and_shares_data_only_at_its_ends():
    @I.ir_module
    class Expected:
        I.module_global_infos(VDEVICES)

        @R.function
        def main(
            x: R.Tensor((1, 2, 8, 8), "float32", "llvm:0"),
            w1: R.Tensor((4, 2, 3, 3), "float32", "llvm:0"),
            w2: R.Tensor((4, 4, 3, 3), "float32", "llvm:0"),
        ):
            with R.dataflow():
                # pool rows 2-3 <- conv2 rows 4-7 <- conv1 rows 3-7 <- input rows 2-7
                lv1 = R.strided_slice(x, (2,), (2,), (8,))
                lv2 = R.to_vdevice(lv1, "llvm:1")
                lv3 = R.to_vdevice(w1, "llvm:1")
                lv4 = R.to_vdevice(w2, "llvm:1")
                # pool rows 0-1 <- conv2 rows 0-3 <- conv1 rows 0-4 <- input rows 0-5
                lv = R.strided_slice(x, (2,), (0,), (6,))
                lv5 = R.nn.conv2d(lv, w1, padding=[1, 1, 0, 1])
                lv6 = R.nn.conv2d(lv5, w2, padding=[1, 1, 0, 1])
                lv7 = R.nn.max_pool2d(lv6, pool_size=[2, 2], strides=[2, 2])
                lv8 = R.nn.conv2d(lv2, lv3, padding=[0, 1, 1, 1])
                lv9 = R.nn.conv2d(lv8, lv4, padding=[0, 1, 1, 1])
                lv10 = R.nn.max_pool2d(lv9, pool_size=[2, 2], strides=[2, 2])
                lv11 = R.to_vdevice(lv10, "llvm:0")
                y = R.concat((lv7, lv11), axis=2)
                R.output(y)
            return y

    ids = ["conv2d_0", "conv2d_1", "max_pool2d_0"]
    plan = Plan(ops={i: OpPlacement("split", "H", 0.5) for i in ids}, chains=[Chain(ids, "H", 0.5)])
    tvm.ir.assert_structural_equal(_run(ConvConvPool, plan), Expected)


def test_unsplit_op_runs_on_its_device_with_copies_only_where_the_device_changes():
    @I.ir_module
    class Expected:
        I.module_global_infos(VDEVICES)

        @R.function
        def main(
            x: R.Tensor((1, 2, 8, 8), "float32", "llvm:0"),
            w1: R.Tensor((4, 2, 3, 3), "float32", "llvm:0"),
            w2: R.Tensor((4, 4, 3, 3), "float32", "llvm:0"),
        ):
            with R.dataflow():
                a = R.nn.conv2d(x, w1, padding=[1, 1, 1, 1])
                lv = R.to_vdevice(a, "llvm:1")
                lv1 = R.to_vdevice(w2, "llvm:1")
                lv2 = R.nn.conv2d(lv, lv1, padding=[1, 1, 1, 1])
                # the pool follows its input onto the CPU: no copy between them
                lv3 = R.nn.max_pool2d(lv2, pool_size=[2, 2], strides=[2, 2])
                lv4 = R.to_vdevice(lv3, "llvm:0")
                y = lv4
                R.output(y)
            return y

    plan = Plan(ops={"conv2d_1": OpPlacement("cpu"), "max_pool2d_0": OpPlacement("cpu")})
    tvm.ir.assert_structural_equal(_run(ConvConvPool, plan), Expected)


@I.ir_module
class Dense:
    @R.function
    def main(x: R.Tensor((2, 16), "float32"), w: R.Tensor((16, 8), "float32")):
        with R.dataflow():
            y = R.matmul(x, w)
            R.output(y)
        return y


def test_matmul_column_split():
    @I.ir_module
    class Expected:
        I.module_global_infos(VDEVICES)

        @R.function
        def main(
            x: R.Tensor((2, 16), "float32", "llvm:0"), w: R.Tensor((16, 8), "float32", "llvm:0")
        ):
            with R.dataflow():
                lv = R.to_vdevice(x, "llvm:1")
                lv1 = R.to_vdevice(w, "llvm:1")
                lv2 = R.strided_slice(w, (1,), (0,), (2,))
                lv3 = R.matmul(x, lv2)
                lv4 = R.strided_slice(lv1, (1,), (2,), (8,))
                lv5 = R.matmul(lv, lv4)
                lv6 = R.to_vdevice(lv5, "llvm:0")
                y = R.concat((lv3, lv6), axis=1)
                R.output(y)
            return y

    plan = Plan(ops={"matmul_0": OpPlacement("split", "OC", 0.25)})
    tvm.ir.assert_structural_equal(_run(Dense, plan), Expected)


def test_matmul_row_split():
    @I.ir_module
    class Expected:
        I.module_global_infos(VDEVICES)

        @R.function
        def main(
            x: R.Tensor((2, 16), "float32", "llvm:0"), w: R.Tensor((16, 8), "float32", "llvm:0")
        ):
            with R.dataflow():
                lv1 = R.strided_slice(x, (0,), (1,), (2,))
                lv2 = R.to_vdevice(lv1, "llvm:1")
                lv3 = R.to_vdevice(w, "llvm:1")
                lv = R.strided_slice(x, (0,), (0,), (1,))
                lv4 = R.matmul(lv, w)
                lv5 = R.matmul(lv2, lv3)
                lv6 = R.to_vdevice(lv5, "llvm:0")
                y = R.concat((lv4, lv6), axis=0)
                R.output(y)
            return y

    plan = Plan(ops={"matmul_0": OpPlacement("split", "H", 0.5)})
    tvm.ir.assert_structural_equal(_run(Dense, plan), Expected)


def test_pass_composes_in_a_sequential_with_relax_passes():
    plan = Plan(ops={"conv2d_0": OpPlacement("split", "H", 0.5)})
    seq = tvm.transform.Sequential(
        [CoExecutionPartition(plan, PAIR), tvm.relax.transform.RealizeVDevice(),
         tvm.relax.transform.LegalizeOps()]
    )
    out = seq(Conv)
    assert "vdevice" in out.global_infos


def test_unknown_op_is_rejected_by_name():
    with pytest.raises(PlanError, match="unknown op 'conv2d_7'"):
        _run(Conv, Plan(ops={"conv2d_7": OpPlacement("gpu")}))


def test_plan_for_another_model_is_rejected():
    other = Plan.uniform(ConvConvPool, "H", 0.5)
    with pytest.raises(PlanError, match="different model"):
        _run(Conv, Plan(ops={}, fingerprint=other.fingerprint))


def test_chain_through_a_shared_value_is_rejected():
    @I.ir_module
    class Branchy:
        @R.function
        def main(x: R.Tensor((1, 2, 8, 8), "float32"), w: R.Tensor((2, 2, 3, 3), "float32")):
            with R.dataflow():
                a = R.nn.conv2d(x, w, padding=[1, 1, 1, 1])
                b = R.nn.conv2d(a, w, padding=[1, 1, 1, 1])
                y = R.add(a, b)
                R.output(y)
            return y

    plan = Plan(chains=[Chain(["conv2d_0", "conv2d_1"], "H", 0.5)])
    with pytest.raises(PlanError, match="not the only reader"):
        _run(Branchy, plan)


def test_ratio_that_leaves_a_device_no_rows_falls_back_with_a_warning():
    plan = Plan(ops={"conv2d_0": OpPlacement("split", "H", 0.01)})
    with pytest.warns(UserWarning, match="leaves the other device no rows; running it on the cpu"):
        out = _run(Conv, plan)
    assert "concat" not in out.script()


def test_oc_chain_through_a_full_conv_falls_back_with_a_warning():
    ids = ["conv2d_0", "conv2d_1"]
    plan = Plan(chains=[Chain(ids, "OC", 0.5)])
    with pytest.warns(UserWarning, match="reads all input channels"):
        _run(ConvConvPool, plan)
