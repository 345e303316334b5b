"""BackTexturesWithBuffers: a texture tensor's storage is a plain buffer of the image's size
(row pitch included), and the tensor names its texture vdevice (the VM makes it an image view)."""

from __future__ import annotations

import tvm
from tvm.script import ir as I
from tvm.script import relax as R

from codl_tvm.passes import BackTexturesWithBuffers

ADRENO = {"kind": "opencl", "device": "adreno", "keys": ["adreno", "opencl", "gpu", "texture"]}
VDEVICES = {"vdevice": [I.vdevice(ADRENO, 0, "global"), I.vdevice({"kind": "llvm"}, 0, "global"),
                        I.vdevice(ADRENO, 0, "global.texture-weight")]}


# a (1, 1, 3, 5, 4) texture-weight tensor is an image 15 texels wide: 240 bytes a row, 256
# with the target's 64-byte row alignment
@I.ir_module
class Before:
    I.module_global_infos(VDEVICES)

    @R.function(pure=False)
    def main(x: R.Tensor((1, 4, 3, 5), "float32")) -> R.Tensor((1, 1, 3, 5, 4), "float32"):
        s: R.Object = R.vm.alloc_storage(R.shape([240]), R.prim_value(0), R.dtype("uint8"),
                                         R.str("global.texture-weight"))
        y: R.Tensor((1, 1, 3, 5, 4), "float32") = R.vm.alloc_tensor(
            s, R.prim_value(0), R.shape([1, 1, 3, 5, 4]), R.dtype("float32"), R.prim_value(0))
        return y


@I.ir_module
class Expected:
    I.module_global_infos(VDEVICES)

    @R.function(pure=False)
    def main(x: R.Tensor((1, 4, 3, 5), "float32")
             ) -> R.Tensor((1, 1, 3, 5, 4), "float32", "opencl:1:global.texture-weight"):
        s: R.Object = R.vm.alloc_storage(R.shape([256]), R.prim_value(0), R.dtype("uint8"),
                                         R.str("global"))
        y: R.Tensor((1, 1, 3, 5, 4), "float32", "opencl:1:global.texture-weight") = (
            R.vm.alloc_tensor(s, R.prim_value(0), R.shape([1, 1, 3, 5, 4]), R.dtype("float32"),
                              R.prim_value(2)))
        return y


def test_texture_storage_becomes_a_buffer_and_its_tensor_a_view():
    tvm.ir.assert_structural_equal(BackTexturesWithBuffers()(Before), Expected)


def test_global_storages_are_untouched():
    tvm.ir.assert_structural_equal(BackTexturesWithBuffers()(Expected), Expected)
