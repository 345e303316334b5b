"""Models and weights of ``benchmarks/anchors.py``: one set of seeded weights for all engines.

The carried folder holds no weights. Each model's *source tensors* (``W``: its float tensors of
at least :data:`MIN_SIZE` elements: the zoo's ONNX initializers, or a torchvision module's
state) are drawn on the machine that runs the benchmark, from a seed and each tensor's recorded
mean and standard deviation (:func:`draw`). Every tensor an engine reads (an ONNX initializer of
the onnxruntime model, a codl-tvm artifact's parameter, a PyTorch state entry) is found at build
time as a strided view of one source tensor (a copy, reshape, transpose or slice of it:
:class:`ValueIndex`) and carried as that recipe; smaller tensors that are no view (biases, batch
norm constants) are carried as values. So codl-tvm, onnxruntime and PyTorch run the same
weights on the target, and outputs compare. The run side imports only numpy, torch and, where
present, torchvision.
"""

from __future__ import annotations

import copy
import json
import platform
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from anchors_replay import Replay, graph_json  # noqa: F401 - graph_json: anchors.py's
from anchors_weights import (  # noqa: F401 - draw ... literal: anchors.py's
    MIN_SIZE,
    ValueIndex,
    draw,
    literal,
    realize,
    recipes,
    spec_of,
)

# name -> where it comes from; "twin": a torchvision module of the same layers (ResNet-18 and
# MobileNet-V2 of the zoo are torchvision's layout), "replay": the ONNX graph run op by op
MODELS: dict[str, dict[str, str]] = {
    "resnet-18": {"zoo": "resnet-18", "torch": "twin", "tv": "resnet18"},
    "mobilenet-v2": {"zoo": "mobilenet-v2", "torch": "twin", "tv": "mobilenet_v2"},
    "resnet-50": {"tv": "resnet50", "torch": "torchvision"},
    "yolo-v2": {"zoo": "yolo-v2", "torch": "replay"},
    "bert-base": {"zoo": "bert-base", "torch": "replay"},
    "vit-b-16": {"tv": "vit_b_16", "torch": "torchvision"},
    "convnext-t": {"tv": "convnext_tiny", "torch": "torchvision"},
}


# ---- build side (full TVM, onnx, torchvision) -------------------------------------------
def seeded_zoo_model(zoo_name: str, seed: int, path: Path) -> list[dict[str, Any]]:
    """Write the zoo model with its float tensors of :data:`MIN_SIZE` elements or more drawn
    from ``seed`` (:func:`draw`) to ``path``; returns their specs."""
    import onnx
    from onnx import numpy_helper

    from codl_tvm import zoo

    proto = onnx.load(zoo.get(zoo_name))
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    specs = [spec_of(k, a) for k, a in inits.items()
             if a.dtype == np.float32 and a.size >= MIN_SIZE]
    drawn = draw(specs, seed)
    for t in proto.graph.initializer:
        if t.name in drawn:
            t.CopyFrom(numpy_helper.from_array(drawn[t.name], t.name))
    onnx.save(proto, path)
    return specs


def source_model(name: str, seed: int, work: Path) -> dict[str, Any]:
    """The model with its source tensors drawn from ``seed``: ONNX files for onnxruntime and
    codl-tvm, the source specs, the inputs and, for torchvision models, the module's state."""
    info, path = MODELS[name], work / f"{name}.onnx"
    if "zoo" in info:
        from codl_tvm import zoo

        specs = seeded_zoo_model(info["zoo"], seed, path)
        inputs = zoo.info(info["zoo"])["inputs"]
        state = None
    else:
        import torch

        module = torchvision_module(info["tv"])
        fixed = {f"{n}.{k}" for n, m in module.named_modules()
                 if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
                 for k in ("weight", "running_mean", "running_var")}
        state = {k: v.numpy() for k, v in module.state_dict().items()
                 if v.dtype == torch.float32 and k not in fixed}
        specs = [spec_of(k, a) for k, a in state.items()]
        load_state(module, draw(specs, seed))
        state = {k: v.numpy().copy() for k, v in module.state_dict().items()
                 if v.dtype == torch.float32}
        inputs = [{"name": "input", "shape": [1, 3, 224, 224], "dtype": "float32"}]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, (torch.zeros(1, 3, 224, 224),), str(path), dynamo=False,
                              opset_version=17, input_names=["input"], output_names=["output"])
    return {"path": path, "specs": specs, "inputs": inputs, "state": state}


def codl_module(path: Path, work: Path) -> tuple[Any, str]:
    """The Relax module of ``path``; where TVM's importer fails (ViT's attention reshapes
    computed from shapes), of onnxruntime's basic-level rewrite (constant folding only,
    standard ONNX ops)."""
    import onnxruntime as ort

    import codl_tvm

    try:
        return codl_tvm.load_model(path), "as exported"
    except codl_tvm.ModelError:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        so.optimized_model_filepath = str(work / f"{path.stem}-basic.onnx")
        ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        return codl_tvm.load_model(so.optimized_model_filepath), "onnxruntime basic rewrite"


def twin_error(ctor: str, state: dict, src: dict) -> float:
    import onnxruntime as ort
    import torch

    x = np.random.default_rng(0).standard_normal(src["inputs"][0]["shape"]).astype("f4")
    ref = ort.InferenceSession(str(src["path"])).run(None, {src["inputs"][0]["name"]: x})[0]
    with torch.inference_mode():
        got = load_state(torchvision_module(ctor), state)(torch.from_numpy(x)).numpy()
    return rel_err(got, ref)


def cpu_name() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
        return next(ln.split(":", 1)[1].strip() for ln in text.splitlines()
                    if ln.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


# ---- PyTorch modules ---------------------------------------------------------------------
def fix_batch_norm(module: Any) -> None:
    """Batch norms that pass values through (scale 1, mean 0, var 1, eps 1e-12: var + eps is
    1.0 in float32, and PyTorch refuses eps 0) and add their bias: exported, they fold into
    the conv exactly (weight * 1.0), so the conv weights stay views of the source tensors."""
    import torch

    for m in module.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.eps = 1e-12
            with torch.no_grad():
                m.weight.fill_(1.0)
                m.running_mean.zero_()
                m.running_var.fill_(1.0)


def torchvision_module(ctor: str) -> Any:
    import torchvision

    module = getattr(torchvision.models, ctor)(weights=None).eval()
    fix_batch_norm(module)
    return module


def load_state(module: Any, state: dict[str, np.ndarray]) -> Any:
    import torch

    tensors = {k: torch.from_numpy(np.array(v)) for k, v in state.items()}
    module.load_state_dict(tensors, strict=False)
    return module.eval()


def twin_state(ctor: str, graph: dict[str, Any], inits: dict[str, np.ndarray]) -> dict:
    """The state of torchvision's ``ctor`` holding a zoo model's weights: its convs (each with
    the batch norm after it, whose bias takes the conv's) and its linear layer take the ONNX
    Conv and Gemm weights in graph order; ValueError where the layers differ."""
    import torch

    module = torchvision_module(ctor)
    layers = [(n, m) for n, m in module.named_modules()
              if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear, torch.nn.BatchNorm2d))]
    nodes = [n for n in graph["nodes"] if n["op"] in ("Conv", "Gemm")]
    state = {k: v.numpy().copy() for k, v in module.state_dict().items()}
    i = 0
    for node in nodes:
        while i < len(layers) and isinstance(layers[i][1], torch.nn.BatchNorm2d):
            i += 1
        if i == len(layers):
            raise ValueError(f"{ctor}: fewer layers than the ONNX graph")
        name, m = layers[i]
        w = inits[node["inputs"][1]]
        if node["op"] == "Gemm" and not node["attrs"].get("transB", 0):
            w = w.T
        if tuple(m.weight.shape) != w.shape:
            raise ValueError(f"{ctor}.{name}: weight {tuple(m.weight.shape)} != {w.shape}")
        state[f"{name}.weight"] = w
        bias = inits.get(node["inputs"][2]) if len(node["inputs"]) > 2 else None
        bn = layers[i + 1] if i + 1 < len(layers) else None
        if isinstance(m, torch.nn.Conv2d) and bn and isinstance(bn[1], torch.nn.BatchNorm2d):
            state[f"{bn[0]}.bias"] = bias if bias is not None else np.zeros(w.shape[0], "f4")
        elif bias is not None:
            state[f"{name}.bias"] = bias
        i += 1
    return {k: v for k, v in state.items() if v.dtype == np.float32}


# ---- engines on the target ---------------------------------------------------------------
def rel_err(got: Any, ref: Any) -> float:
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def outputs_err(got: list, ref: list) -> float:
    return max(rel_err(g, r) for g, r in zip(got, ref))


def make_inputs(specs: list[dict], seed: int) -> dict[str, np.ndarray]:
    rng, out = np.random.default_rng(seed), {}
    for s in specs:
        if s["dtype"] == "float32":
            out[s["name"]] = rng.standard_normal(s["shape"]).astype(np.float32)
        elif s["name"] == "attention_mask":  # the last quarter is padding
            out[s["name"]] = (np.arange(s["shape"][-1]) < s["shape"][-1] * 3 // 4).astype(
                np.int64)[None].repeat(s["shape"][0], 0)
        else:
            out[s["name"]] = rng.integers(0, s["high"], s["shape"]).astype(np.int64)
    return out


def seeded(folder: Path, seed: int = 0) -> tuple[dict, Any, dict, dict]:
    """An ``anchors.py build`` model folder's (meta, literals, source tensors drawn from its
    seed, inputs drawn from ``seed``): what every engine of it reads."""
    meta = json.loads((folder / "meta.json").read_text())
    sources = {k: v for k, v in draw(meta["sources"], meta["seed"]).items() if v.size >= MIN_SIZE}
    return meta, np.load(folder / "literals.npz"), sources, make_inputs(meta["inputs"], seed)


def ort_session(folder: Path, meta: dict, sources: dict, threads: int, tmp: Path) -> Any:
    """onnxruntime on the graph with its weights file written here from the recipes."""
    import onnxruntime as ort

    shutil.copy(folder / "model.onnx", tmp / "model.onnx")
    with open(tmp / "weights.bin", "wb") as f:
        f.truncate(meta["onnx"]["bytes"])
        for e in meta["onnx"]["external"]:
            f.seek(e["at"])
            f.write(np.ascontiguousarray(realize({"w": e}, sources, {})["w"]).tobytes())
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(tmp / "model.onnx"), so, providers=["CPUExecutionProvider"])


def torch_modules(meta: dict, sources: dict, lits: Any) -> tuple[Any, str]:
    """A factory of the PyTorch anchor on a device (``make(dev)(inputs) -> outputs``) and
    what it is: torchvision's module, or the ONNX graph replayed (zoo models; also where
    torchvision is missing here)."""
    spec = meta["torch"]
    if spec["kind"] == "torchvision":
        try:
            module = load_state(torchvision_module(spec["ctor"]),
                                realize(spec["state"], sources, lits))
        except ImportError:
            if "graph" not in spec:
                raise
        else:
            return (lambda dev: _Call(copy.deepcopy(module).to(dev))), "torchvision"
    inits = realize({e["name"]: e for e in meta["onnx"]["external"]}, sources, lits)
    inits |= {k: lits[v] for k, v in meta["onnx"]["embedded"].items()}
    return (lambda dev: Replay(spec["graph"], inits, dev)), "replay"


class _Call:
    def __init__(self, module: Any):
        self.module = module

    def __call__(self, input: Any) -> list:  # noqa: A002 - the models' input name
        return [self.module(input)]


def torch_engines(make: Any, inputs: dict, gpu: bool) -> dict[str, tuple[Any, list]]:
    """PyTorch eager on the CPU and, with ``gpu``, eager and CUDA-graph replay on the GPU:
    engine name -> (call, outputs of one run)."""
    import torch

    def call(fn: Any, x: dict, sync: Any) -> Any:
        def run() -> None:
            with torch.inference_mode():
                fn(**x)
            sync()
        return run

    out = {}
    for dev in ["cpu"] + (["cuda"] if gpu else []):
        fn, x = make(dev), {k: torch.from_numpy(v).to(dev) for k, v in inputs.items()}
        with torch.inference_mode():
            got = fn(**x)
        if dev == "cpu":
            out["torch-cpu"] = call(fn, x, lambda: None), got
        else:
            out["torch-cuda"] = call(fn, x, torch.cuda.synchronize), got
            out["torch-graph"] = cuda_graph(fn, x)
    return out


def cuda_graph(fn: Any, x: dict) -> tuple[Any, list]:
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.inference_mode(), torch.cuda.stream(s):
        for _ in range(3):
            fn(**x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.inference_mode(), torch.cuda.graph(g):
        got = fn(**x)
    g.replay()
    torch.cuda.synchronize()
    return (lambda: (g.replay(), torch.cuda.synchronize())), got


def codl_engine(folder: Path, meta: dict, variant: str, sources: dict, lits: Any,
                inputs: dict) -> tuple[Any, list]:
    """The artifact ``variant`` with the weights drawn here: (call on inputs already on its
    devices, outputs of one run)."""
    from codl_tvm import runtime

    runner = runtime.load(folder / variant,
                          params=realize(meta["codl"][variant]["params"], sources, lits))
    main, args, dev = runner.vm["main"], runner._args(inputs), runner.devices[0]
    got = runner.run(inputs)
    if variant.startswith("gpu"):  # kernels are asynchronous: wait for them
        return (lambda: (main(*args), dev.sync())), got
    return (lambda: main(*args)), got
