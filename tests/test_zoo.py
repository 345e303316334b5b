"""codl_tvm.zoo: every model builds, passes onnx.checker, imports through from_onnx, runs
on TVM's CPU with the same answer as onnxruntime / a numpy reference, and its layer shapes
cover the published operator dataset (workloads/*.csv)."""

from __future__ import annotations

import csv
import math
import os
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from codl_tvm import zoo
from codl_tvm.zoo import cache as zoo_cache

# Small variants that import and compile in seconds on 2 cores.
SMALL: dict[str, dict] = {
    "yolo-v2": {"input_shape": (32, 32)},
    "vgg-16": {"input_shape": (32, 32)},
    "posenet": {"input_shape": (32, 32)},
    "fast-style-transfer": {"input_shape": (16, 16)},
    "resnet-18": {"input_shape": (32, 32)},
    "mobilenet-v1": {"input_shape": (32, 32)},
    "mobilenet-v2": {"input_shape": (32, 32)},
    "inception-v3": {"input_shape": (75, 75)},
    "lstm": {},
    "gru": {"input_shape": (3, 80), "batch": 2},
    "bert-base": {
        "input_shape": (8,),
        "num_layers": 2,
        "hidden_size": 32,
        "num_heads": 4,
        "intermediate_size": 64,
        "vocab_size": 50,
    },
    "tiny-cnn": {},
}
# Config variants whose extra code paths (BatchNormalization, Resize) must import too.
VARIANTS: dict[str, dict] = {
    "resnet-18-bn-op": {"name": "resnet-18", "input_shape": (32, 32), "fold_bn": False},
    "style-resize": {
        "name": "fast-style-transfer",
        "input_shape": (16, 24),
        "upsample": "resize",
        "norm": "none",
    },
    "tiny-cnn-b3": {"name": "tiny-cnn", "batch": 3, "input_shape": (16, 24)},
}
CASES = {**{n: {"name": n, **kw} for n, kw in SMALL.items()}, **VARIANTS}
# Cases whose weights (up to 200 MB at any input size) make a TVM compile take > 5 s.
HEAVY = {"yolo-v2", "inception-v3", "vgg-16", "mobilenet-v2", "posenet", "resnet-18-bn-op"}
CASE_PARAMS = [pytest.param(c, marks=[pytest.mark.slow] * (c in HEAVY)) for c in sorted(CASES)]

# Dataset model name -> zoo name. Rows of models the zoo lacks (AlexNet, DenseNet) are skipped.
CSV_MODELS = {
    "YOLO-V2": "yolo-v2",
    "VGG-16": "vgg-16",
    "POSENET": "posenet",
    "FAST_STYLE_TRANSFER": "fast-style-transfer",
    "INCEPTION-V3": "inception-v3",
}


def _split(case: dict) -> tuple[str, dict]:
    kw = dict(case)
    return kw.pop("name"), kw


def test_list_models_has_the_papers_models():
    names = zoo.list_models()
    assert set(SMALL) == set(names)
    assert len(names) == len(set(names))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_info_describes_inputs(name):
    desc = zoo.info(name, **SMALL[name])
    assert desc["paper"] and desc["notes"] and desc["input_shape_meaning"]
    model = zoo.build(name, **SMALL[name], check=False)
    got = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    assert got == {i["name"]: i["shape"] for i in desc["inputs"]}


def test_unknown_model_lists_known_ones():
    with pytest.raises(ValueError, match="known models: .*yolo-v2.*tiny-cnn"):
        zoo.get("yolo-v9")
    with pytest.raises(ValueError, match="unknown zoo model"):
        zoo.info("resnet-1000")


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        ("tiny-cnn", {"depth": 3}, "unknown config depth; accepted: seed, fold_bn"),
        ("yolo-v2", {"input_shape": (50, 50)}, "multiples of 32"),
        ("yolo-v2", {"input_shape": (1, 64, 64)}, "3 input channels"),
        ("inception-v3", {"input_shape": (64, 64)}, ">= 75"),
        ("bert-base", {"input_shape": (0,)}, "bad input_shape"),
        ("lstm", {"input_shape": (4,)}, r"\(seq_len, input_size\)"),
        ("tiny-cnn", {"batch": 0}, "batch must be a positive int"),
        ("fast-style-transfer", {"input_shape": (16, 16), "upsample": "bilinear"}, "upsample"),
        ("bert-base", {"hidden_size": 30, "num_heads": 4}, "not divisible"),
    ],
)
def test_bad_arguments_raise_one_clear_message(name, kwargs, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        zoo.get(name, cache_dir=tmp_path, **kwargs)
    assert not list(tmp_path.iterdir())


def test_build_is_deterministic_and_seeded():
    a = zoo.build("tiny-cnn").SerializeToString()
    assert a == zoo.build("tiny-cnn").SerializeToString()
    b = zoo.build("tiny-cnn", seed=1)
    assert a != b.SerializeToString()


def test_get_caches_by_key(tmp_path):
    path = zoo.get("tiny-cnn", cache_dir=tmp_path)
    assert path.parent == tmp_path and path.suffix == ".onnx"
    stamp = path.stat().st_mtime_ns
    assert zoo.get("tiny-cnn", cache_dir=tmp_path) == path
    assert path.stat().st_mtime_ns == stamp  # not rebuilt
    others = {
        zoo.get("tiny-cnn", cache_dir=tmp_path, batch=2),
        zoo.get("tiny-cnn", cache_dir=tmp_path, input_shape=(16, 16)),
        zoo.get("tiny-cnn", cache_dir=tmp_path, seed=3),
        zoo.get("tiny-cnn", cache_dir=tmp_path, width=4),
    }
    assert len(others) == 4 and path not in others
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted([path.name, *(p.name for p in others)])  # no temp files left
    batch2 = onnx.load(zoo.get("tiny-cnn", cache_dir=tmp_path, batch=2))
    assert [d.dim_value for d in batch2.graph.input[0].type.tensor_type.shape.dim] == [2, 3, 32, 32]


def test_import_relax_goes_through_the_cached_file(tmp_path):
    import tvm

    mod = zoo.import_relax("gru", cache_dir=tmp_path, batch=4)
    assert isinstance(mod, tvm.IRModule) and len(list(tmp_path.glob("gru_b4_*.onnx"))) == 1
    assert [int(d) for d in mod["main"].params[0].ty.shape] == [4, 1, 80]


def test_cache_folder_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("CODL_TVM_CACHE", str(tmp_path))
    assert zoo.get("lstm").parent == tmp_path / "zoo"
    monkeypatch.delenv("CODL_TVM_CACHE")
    assert zoo_cache.cache_root() == Path.home() / ".cache" / "codl-tvm" / "zoo"


def test_interrupted_write_leaves_nothing(tmp_path, monkeypatch):
    def half_write(model, path):
        Path(path).write_bytes(model.SerializeToString()[:100])
        raise KeyboardInterrupt

    monkeypatch.setattr(zoo_cache.onnx, "save_model", half_write)
    with pytest.raises(KeyboardInterrupt):
        zoo.get("tiny-cnn", cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    onnx.checker.check_model(str(zoo.get("tiny-cnn", cache_dir=tmp_path)), full_check=True)


# -- through TVM ----------------------------------------------------------------------------
def _run_tvm(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    mod = from_onnx(model, keep_params_in_input=False)
    exe = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
    vm = relax.VirtualMachine(exe, tvm.cpu())
    args = [tvm.runtime.tensor(inputs[i.name], tvm.cpu()) for i in model.graph.input]
    out = vm["main"](*args)
    return [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]


def _rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory) -> Path:
    """One cache for the module: each model is built once, later tests load its file."""
    return tmp_path_factory.mktemp("zoo-cache")


@pytest.mark.parametrize("case", sorted(CASES))
def test_model_checks_and_imports(case, shared_cache):
    """The user's path: cached file -> onnx.load -> checker -> from_onnx."""
    import tvm
    from tvm.relax.frontend.onnx import from_onnx

    name, kw = _split(CASES[case])
    model = onnx.load(zoo.get(name, cache_dir=shared_cache, **kw))
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == 17
    mod = from_onnx(model, keep_params_in_input=False)
    assert isinstance(mod, tvm.IRModule)
    params = mod["main"].params
    assert len(params) == len(model.graph.input)  # weights became constants, not inputs
    expected = [[d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input]
    assert [[int(d) for d in p.ty.shape] for p in params] == expected


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_tvm_cpu_matches_onnxruntime(case, shared_cache):
    ort = pytest.importorskip("onnxruntime")
    name, kw = _split(CASES[case])
    model = onnx.load(zoo.get(name, cache_dir=shared_cache, **kw))
    inputs = zoo.sample_inputs(name, **kw)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    refs = sess.run(None, inputs)
    for got, ref in zip(_run_tvm(model, inputs), refs, strict=True):
        assert got.shape == ref.shape
        assert np.isfinite(ref).all() and ref.std() > 1e-3  # weights keep activations alive
        assert _rel_err(got, ref) <= 2e-5


# -- numpy reference of tiny-cnn (no onnxruntime needed) ------------------------------------
def _np_conv(x, w, b, stride, pads):
    pt, pl, pb, pr = pads
    x = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    kh, kw = w.shape[2:]
    oh, ow = (x.shape[2] - kh) // stride + 1, (x.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow), np.float64)
    for i in range(kh):
        for j in range(kw):
            patch = x[:, :, i : i + stride * oh : stride, j : j + stride * ow : stride]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return out + b[None, :, None, None]


def _np_pool(x, kind, k, s):
    n, c, h, w = x.shape
    oh, ow = (h - k) // s + 1, (w - k) // s + 1
    wins = [x[:, :, i : i + s * oh : s, j : j + s * ow : s] for i in range(k) for j in range(k)]
    return np.max(wins, axis=0) if kind == "MaxPool" else np.mean(wins, axis=0)


def _numpy_reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """Interpret tiny-cnn's ops (Conv, Relu, MaxPool, AveragePool, Flatten, Gemm) in float64."""
    env = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    env[model.graph.input[0].name] = x.astype(np.float64)
    for node in model.graph.node:
        a = {at.name: onnx.helper.get_attribute_value(at) for at in node.attribute}
        ins = [env[i] for i in node.input]
        if node.op_type == "Conv":
            assert a.get("group", 1) == 1 and a.get("dilations", [1, 1]) == [1, 1]
            out = _np_conv(ins[0], ins[1], ins[2], a["strides"][0], a["pads"])
        elif node.op_type in ("MaxPool", "AveragePool"):
            assert not any(a["pads"])
            out = _np_pool(ins[0], node.op_type, a["kernel_shape"][0], a["strides"][0])
        elif node.op_type == "Gemm":
            assert a["transB"] == 1
            out = ins[0] @ ins[1].T + ins[2]
        else:
            out = {
                "Relu": lambda v: np.maximum(v, 0),
                "Flatten": lambda v: v.reshape(v.shape[0], -1),
                "Identity": lambda v: v,
            }[node.op_type](ins[0])
        env[node.output[0]] = out
    return env[model.graph.output[0].name]


@pytest.mark.parametrize("kw", [{}, {"batch": 2, "input_shape": (16, 40), "width": 5}])
def test_tiny_cnn_matches_numpy_reference(kw):
    model = zoo.build("tiny-cnn", **kw)
    x = zoo.sample_inputs("tiny-cnn", **kw)["input"]
    ref = _numpy_reference(model, x)
    (got,) = _run_tvm(model, {"input": x})
    assert got.shape == ref.shape and ref.std() > 1e-3
    assert _rel_err(got, ref) <= 1e-5


# -- layer shapes against the CoDL operator dataset -----------------------------------------
def _workloads_dir() -> Path | None:
    here = Path(__file__).resolve().parent.parent
    candidates = [os.environ.get("CODL_TVM_WORKLOADS"), here.parent / "shared" / "workloads",
                  Path("/work/shared/workloads"), here / "codl_tvm" / "data"]  # fmt: skip
    return next((Path(c) for c in candidates if c and (Path(c) / "conv2d.csv").exists()), None)


def _csv_rows(kind: str) -> list[dict[str, str]]:
    folder = _workloads_dir()
    if folder is None:
        pytest.skip("workloads/*.csv not found (set CODL_TVM_WORKLOADS)")
    with open(folder / f"{kind}.csv", newline="") as f:
        return list(csv.DictReader(f))


def _layer_shapes(model: onnx.ModelProto) -> Counter:
    """(op, shape key) of every Conv, MaxPool/AveragePool and Gemm, from ONNX shape inference
    on a weight-free copy of the graph (so half-gigabyte models infer in milliseconds)."""
    skel = onnx.ModelProto(ir_version=model.ir_version)
    skel.opset_import.extend(model.opset_import)
    skel.graph.node.extend(model.graph.node)
    skel.graph.input.extend(model.graph.input)
    skel.graph.output.extend(model.graph.output)
    dims = {t.name: list(t.dims) for t in model.graph.initializer}
    for name, d in dims.items():
        skel.graph.input.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, d))
    inferred = onnx.shape_inference.infer_shapes(skel, strict_mode=True).graph
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*inferred.input, *inferred.value_info, *inferred.output]}  # fmt: skip
    found: Counter = Counter()
    for node in model.graph.node:
        a = {at.name: onnx.helper.get_attribute_value(at) for at in node.attribute}
        if node.op_type in ("Conv", "MaxPool", "AveragePool"):
            _, c, h, w = shapes[node.input[0]]
            _, oc, oh, ow = shapes[node.output[0]]
            kh, kw = a["kernel_shape"]
            sh, sw = a.get("strides", [1, 1])
            is_conv = node.op_type == "Conv"
            extra = (a.get("group", 1), *a.get("dilations", [1, 1])) if is_conv else ()
            found[(node.op_type, h, w, c, oc, kh, kw, sh, sw, oh, ow, *extra)] += 1
        elif node.op_type == "Gemm":
            oc, ic = dims[node.input[1]]
            found[("Gemm", ic, oc)] += 1
    return found


def _expected_out(size: int, k: int, s: int, pad_type: int, pad_total: int, dil: int) -> int:
    if pad_type == 1:  # SAME
        return math.ceil(size / s)
    return (size + pad_total - (k - 1) * dil - 1) // s + 1


def _csv_key(kind: str, r: dict[str, str]) -> tuple:
    v = {k: int(x) for k, x in r.items() if k != "CNN"}
    if kind == "dense":
        return ("Gemm", v["IH"] * v["IW"] * v["IC"], v["OC"])
    pad_type = v["PT"] if kind == "conv2d" else v["PAT"]
    dh, dw = max(v["DH"], 1), max(v["DW"], 1)  # VGG-16's rows write dilation 0
    oh = _expected_out(v["IH"], v["KH"], v["SH"], pad_type, v["PH"], dh)
    ow = _expected_out(v["IW"], v["KW"], v["SW"], pad_type, v["PW"], dw)
    head = (v["IH"], v["IW"], v["IC"], v["OC"], v["KH"], v["KW"], v["SH"], v["SW"], oh, ow)
    if kind == "conv2d":
        return ("Conv", *head, 1, dh, dw)
    return ({2: "MaxPool", 1: "AveragePool"}[v["POT"]], *head)


@pytest.mark.parametrize(
    "csv_name", [pytest.param(n, marks=[pytest.mark.slow] * (n == "VGG-16")) for n in CSV_MODELS]
)
def test_layer_shapes_cover_workload_csv(csv_name):
    """Every dataset row of the model (with its multiplicity) is one of the model's layers."""
    wanted: Counter = Counter()
    for kind in ("conv2d", "pool2d", "dense"):
        wanted.update(_csv_key(kind, r) for r in _csv_rows(kind) if r["CNN"] == csv_name)
    assert wanted, f"no rows for {csv_name}"
    found = _layer_shapes(zoo.build(CSV_MODELS[csv_name], check=False))
    missing = wanted - found
    assert not missing, f"{csv_name}: rows not among the model's layers: {dict(missing)}"
