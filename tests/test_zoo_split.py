"""Every zoo model, at a small input, compiles on the cpu-pair under a uniform split plan and
matches its unsplit run (issue 6); the unsplit run matches onnxruntime, so both are right, not
just equal (a misscheduled conv2d_transpose once made them equally wrong)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import codl_tvm
from codl_tvm import Plan, zoo

PAIR = codl_tvm.DevicePair.preset("cpu-pair")
ORT_TOL = 1e-4
# small inputs / configs so each model builds and runs in seconds; (dim, ratio, chain) varies
CASES = {
    "yolo-v2": (dict(input_shape=(64, 64)), ("H", 0.6, True)),
    "vgg-16": (dict(input_shape=(32, 32)), ("OC", 0.5, False)),
    "posenet": (dict(input_shape=(32, 32)), ("H", 0.7, True)),
    "fast-style-transfer": (dict(input_shape=(32, 32)), ("H", 0.5, True)),
    "resnet-18": (dict(input_shape=(32, 32)), ("OC", 0.3, False)),
    "mobilenet-v1": (dict(input_shape=(32, 32)), ("OC", 0.6, True)),
    "mobilenet-v2": (dict(input_shape=(32, 32)), ("H", 0.4, False)),
    "inception-v3": (dict(input_shape=(75, 75)), ("H", 0.5, True)),
    "lstm": ({}, ("OC", 0.5, False)),
    "gru": ({}, ("OC", 0.5, False)),
    "bert-base": (dict(input_shape=(8,), num_layers=1, hidden_size=64, num_heads=2,
                       intermediate_size=128, vocab_size=100), ("OC", 0.5, False)),
    "tiny-cnn": ({}, ("H", 0.5, True)),
}


def test_every_zoo_model_has_a_case():
    assert set(CASES) == set(zoo.list_models())


@pytest.mark.parametrize("name", sorted(CASES))
def test_zoo_model_split_matches_unsplit(name, tmp_path):
    kwargs, (dim, ratio, chain) = CASES[name]
    path = zoo.get(name, cache_dir=tmp_path, **kwargs)
    mod = codl_tvm.load_model(path)
    plan = Plan.uniform(mod, dim, ratio, chain=chain)
    assert plan.ops, f"{name}: nothing to split"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # stated fallbacks (1-row dense layers)
        split = codl_tvm.compile(mod, PAIR, plan)
    unsplit = codl_tvm.compile(mod, PAIR)
    inputs = zoo.sample_inputs(name, seed=0, **kwargs)
    _check_against_onnxruntime(name, path, unsplit.run(inputs), inputs)
    for out, ref in zip(split.run(inputs), unsplit.run(inputs)):
        if np.issubdtype(ref.dtype, np.floating):
            err = np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30)
            assert err <= 1e-5, f"{name}: relative error {err:.2e}"
        else:
            np.testing.assert_array_equal(out, ref)


def _check_against_onnxruntime(name, path, outs, inputs):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for out, ref in zip(outs, sess.run(None, inputs), strict=True):
        if np.issubdtype(ref.dtype, np.floating):
            err = np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30)
            # other kernels, other summation orders: float32 rounding, not 1e-5 exactness
            assert err <= ORT_TOL, f"{name}: codl-tvm vs onnxruntime relative error {err:.2e}"
        else:
            np.testing.assert_array_equal(out, ref)
