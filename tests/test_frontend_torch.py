"""``codl_tvm.from_torch``: a torchvision model through torch.export, unsplit and split.

Skipped where PyTorch or torchvision is missing (the ``torch`` extra is optional)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

import codl_tvm  # noqa: E402
from codl_tvm import DevicePair, Plan  # noqa: E402
from codl_tvm.frontend import OUTPUT_NAMES_ATTR, ModelError  # noqa: E402


def _rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


@pytest.mark.slow  # two real builds of ResNet-18 on the cpu-pair: ~1 min on 2 cores
def test_resnet18_gives_torchs_answer_and_every_split_the_unsplit_one() -> None:
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        expected = model.eval()(x).numpy()
    mod = codl_tvm.from_torch(model, (x,))
    assert len(mod.attrs[OUTPUT_NAMES_ATTR]) == 1
    pair = DevicePair.preset("cpu-pair")
    inputs = {"x": x.numpy()}
    whole = codl_tvm.compile(mod, pair).run(inputs)[0]
    assert _rel_err(whole, expected) < 1e-4  # other kernels, other summation orders
    split = codl_tvm.compile(mod, pair, Plan.uniform(mod, "OC", 0.5)).run(inputs)[0]
    assert _rel_err(split, whole) <= 1e-5


def test_a_module_torch_cannot_export_is_one_clear_error() -> None:
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            return x[x > 0]  # output shape depends on the values

    with pytest.raises(ModelError, match="could not export or import"):
        codl_tvm.from_torch(DataDependent(), (torch.randn(4),))


@pytest.mark.slow  # three builds of a small ShuffleNet on the cpu-pair
def test_torchvision_shufflenet_as_torchscripts_onnx_exporter_writes_it(tmp_path) -> None:
    """Its channel shuffle computes shapes through Shape/Gather/Div: folded before import
    (``onnx_fold``), the model loads, gives onnxruntime's answer, and splits equal it."""
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    model = torchvision.models.shufflenet_v2_x0_5().eval()
    x = torch.randn(1, 3, 64, 64)
    path = tmp_path / "shufflenet.onnx"
    torch.onnx.export(model, (x,), str(path), opset_version=17, dynamo=False,
                      input_names=["input"])  # fmt: skip
    mod = codl_tvm.load_model(path)
    feed = {"input": x.numpy()}
    expected = ort.InferenceSession(str(path)).run(None, feed)[0]
    pair = DevicePair.preset("cpu-pair")
    whole = codl_tvm.compile(mod, pair).run(feed)[0]
    assert _rel_err(whole, expected) < 1e-4
    for dim in ("H", "OC"):
        split = codl_tvm.compile(mod, pair, Plan.uniform(mod, dim, 0.5)).run(feed)[0]
        assert _rel_err(split, whole) <= 1e-5
