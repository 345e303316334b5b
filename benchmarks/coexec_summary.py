"""Summaries of a ``coexec_conv.py`` result: per shape the best single processor, the best
split, its share of the ideal gain and its overhead over its parts, and the ratios of the
twin builds (one stream, kernel slices, copies within the GPU, Python stream functions, the
CPU's rows in one piece) to the splits they are built like."""

from __future__ import annotations

SERIAL = "/one-stream"  # variant suffix: built with one stream (overlap=False)
KERNEL_SLICES = "/kernel-slices"  # variant suffix: built with slice and concat kernels
# variant suffix: block copies, the GPU's rows copied within the GPU (block_in_kernels=False)
GPU_COPIES = "/gpu-copies"
# variant suffix: the same artifact run with the Python stream functions (CODL_TVM_STREAMS)
PYTHON_STREAMS = "/python-streams"
# variant suffix: the CPU's rows in one piece, uploaded when all are done (cpu_chunks=1)
ONE_CHUNK = "/one-chunk"
TWINS = (SERIAL, KERNEL_SLICES, GPU_COPIES, PYTHON_STREAMS, ONE_CHUNK)


def base_variant(name: str) -> str:
    """The split a twin variant is built like (``H@0.9/one-stream`` -> ``H@0.9``)."""
    for twin in TWINS:
        name = name.removesuffix(twin)
    return name


def summaries(rows: list[dict], shapes: dict[str, dict], floor: list[dict]) -> list[dict]:
    out = []
    for name in dict.fromkeys(r["shape"] for r in rows):
        s = summarize([r for r in rows if r["shape"] == name], shapes[name], floor)
        s.update(split_overhead(s, shapes[name], floor))
        out.append(s)
    return out


def summarize(rows: list[dict], shape: dict | None = None, floor: list[dict] = ()) -> dict:
    """Best single processor and best (overlapped) split of one shape; overlapped / one-stream
    latency ratios; with ``shape`` and the copy ``floor``, what each split with measured parts
    adds to them."""
    by = {r["variant"]: r["latency_ms"] for r in rows}
    splits = {k: v for k, v in by.items() if "@" in k and base_variant(k) == k and ":" not in k}
    serial = {k.removesuffix(SERIAL): by[k.removesuffix(SERIAL)] / v
              for k, v in by.items() if k.endswith(SERIAL)}
    kernel_slices, gpu_copies, python_streams, one_chunk = (
        {k.removesuffix(twin): by[k.removesuffix(twin)] / v
         for k, v in by.items() if k.endswith(twin)}
        for twin in (KERNEL_SLICES, GPU_COPIES, PYTHON_STREAMS, ONE_CHUNK))
    best = min(splits, key=splits.get)
    single = min(by["cpu-only"], by["gpu-only"])
    return {"shape": rows[0]["shape"], "cpu_ms": by["cpu-only"], "gpu_ms": by["gpu-only"],
            "best_split": best, "split_ms": splits[best], "speedup": single / splits[best],
            "best_h": min((k for k in splits if k.startswith("H")), key=splits.get),
            "best_oc": min((k for k in splits if k.startswith("OC")), key=splits.get),
            "overlap_over_one_stream": serial,
            "blocks_over_kernel_slices": kernel_slices,
            "blocks_over_gpu_copies": gpu_copies,
            "native_over_python_streams": python_streams,
            "chunked_over_one_chunk": one_chunk,
            "ideal_ms": 1 / (1 / by["cpu-only"] + 1 / by["gpu-only"]),
            # what each split with measured parts adds to the slower of its parts
            "measured_overhead_us": _over_parts(by, splits, shape, floor),
            # each part built alone over its share of its processor's whole-op time
            "part_over_share": _part_shares(by, splits),
            # a split whose CPU side is its long pole over that side (CPU part + its copies at
            # the pinned floor)
            "split_over_cpu_side": _over_cpu_side(by, splits, shape, floor),
            # the same splits run with the Python stream functions (where twinned)
            "measured_overhead_python_streams_us": _over_parts(by, {
                k: by[k + PYTHON_STREAMS] for k in splits if k + PYTHON_STREAMS in by},
                shape, floor)}


def _over_parts(by: dict[str, float], splits: dict[str, float], shape: dict | None,
                floor: list[dict]) -> dict[str, float]:
    """What each split with measured parts adds to max(GPU part, CPU part + its copies at
    the pinned bandwidth of ``floor``) (us). The CPU part's artifact keeps its input and
    output on the CPU, so its copies are added here, as the issue's bound has them."""
    if shape is None:
        return {}
    return {k: 1e3 * (v - max(by[f"gpu-part:{k}"], by[f"cpu-part:{k}"]
                              + cpu_copies_ms(shape, k, floor)))
            for k, v in splits.items() if f"gpu-part:{k}" in by and f"cpu-part:{k}" in by}


def _part_shares(by: dict[str, float], splits: dict[str, float]) -> dict[str, dict]:
    out = {}
    for k in splits:
        if f"gpu-part:{k}" in by and f"cpu-part:{k}" in by:
            r = float(k.partition("@")[2])
            out[k] = {"gpu": by[f"gpu-part:{k}"] / (r * by["gpu-only"]),
                      "cpu": by[f"cpu-part:{k}"] / ((1 - r) * by["cpu-only"])}
    return out


def _over_cpu_side(by: dict[str, float], splits: dict[str, float], shape: dict | None,
                   floor: list[dict]) -> dict[str, float]:
    out = {}
    for k, v in splits.items():
        if shape is None or f"cpu-part:{k}" not in by:
            continue
        cpu_side = by[f"cpu-part:{k}"] + cpu_copies_ms(shape, k, floor)
        if cpu_side > by[f"gpu-part:{k}"]:
            out[k] = v / cpu_side
    return out


def cpu_copies_ms(shape: dict, split: str, floor: list[dict]) -> float:
    """The CPU part's copies of ``split`` (``H@0.9``) at the pinned 8 MB bandwidth of
    ``floor``: its input rows and halo (rows) or the whole input (channels) to the host, its
    output block back; free where ``floor`` has no pinned rows (no CUDA)."""
    dim, _, ratio = split.partition("@")
    r = float(ratio)
    oh, ow = shape["h"] // shape["sh"], shape["w"] // shape["sw"]
    if dim == "H":
        rows_in = (1 - r) * oh * shape["sh"] + shape["kh"] - 1  # the CPU's rows and halo
        bytes_in = 4 * rows_in * shape["w"] * shape["ic"]
        bytes_out = 4 * (1 - r) * oh * ow * shape["oc"]
    else:
        bytes_in = 4 * shape["h"] * shape["w"] * shape["ic"]
        bytes_out = 4 * (1 - r) * shape["oc"] * oh * ow
    gbps = {f["direction"]: f["gb_per_s"] for f in floor if f["memory"] == "pinned"
            and f["mb"] == 8} or {"d2h": float("inf"), "h2d": float("inf")}
    return (bytes_in / gbps["d2h"] + bytes_out / gbps["h2d"]) / 1e6


def copy_bound(shape: dict, cpu_ms: float, gpu_ms: float, floor: list[dict],
               step: float = 0.005) -> tuple[float, str]:
    """The fastest a split of ``shape`` can be where each part takes its share of its
    processor's whole-op time and the CPU's copies move at the pinned bandwidth of ``floor``
    (:func:`cpu_copies_ms`), nothing else added: the minimum over rows and channels and GPU
    shares on a ``step`` grid of max(GPU part, CPU part + its copies), with its split; the
    better single processor where no split beats it. The ideal counts no copies; this is
    the ideal of a split over this bus."""
    best = (min(cpu_ms, gpu_ms), "")
    for dim in ("H", "OC"):
        for i in range(1, round(1 / step)):
            r = i * step
            t = max(gpu_ms * r, cpu_ms * (1 - r)
                    + cpu_copies_ms(shape, f"{dim}@{r}", floor))
            if t < best[0]:
                best = (t, f"{dim}@{r:g}")
    return best


def split_overhead(s: dict, shape: dict, floor: list[dict]) -> dict:
    """What the best split costs beyond its parts: split_ms - max(GPU part, CPU part + its
    copies at the pinned bandwidth of ``floor``). The parts are measured where they were built
    alone, else scaled from the single-processor times by share."""
    single = min(s["cpu_ms"], s["gpu_ms"])
    gain = single - s["ideal_ms"]
    bound_ms, bound_split = copy_bound(shape, s["cpu_ms"], s["gpu_ms"], floor)
    shares = {"ideal_gain_share": gain / single,
              "gain_reached": (single - s["split_ms"]) / gain if gain > 0 else None,
              # how much of the ideal gain a split can reach at all, its copies at the floor
              "copy_bound_ms": bound_ms, "copy_bound_split": bound_split,
              "copy_bound_gain_share": (single - bound_ms) / gain if gain > 0 else None}
    if s["best_split"] in s["measured_overhead_us"]:
        return {"overhead_us": s["measured_overhead_us"][s["best_split"]],
                "overhead_from": "parts", **shares}
    r = float(s["best_split"].partition("@")[2])
    parts_ms = max(s["gpu_ms"] * r, s["cpu_ms"] * (1 - r)
                   + cpu_copies_ms(shape, s["best_split"], floor))
    return {"overhead_us": 1e3 * (s["split_ms"] - parts_ms), "overhead_from": "estimate",
            **shares}


TWIN_TABLES = {  # summary key -> what its ratios are, each a split over its twin
    "blocks_over_kernel_slices": "block copies / kernel slices, same split, same run",
    "blocks_over_gpu_copies":
        "block copies, GPU part on the whole tensors / with copies within the GPU",
    "native_over_python_streams": "native / Python stream functions, same artifact, same run",
    "chunked_over_one_chunk":
        "CPU rows in chunks, each uploaded while the next computes / in one piece",
}


def print_table(result: dict) -> None:
    print(f"\nSMs: {result['sms']}")
    print("shape                         cpu-only ms  gpu-only ms  ideal ms  best split "
          "  split ms  speedup  gain reached  overhead us  overlap/one-stream (H@0.9, OC@0.875)")
    for s in result["rows"]:
        reached = s["gain_reached"]
        st = s["overlap_over_one_stream"]
        print(f"{s['shape']:28s} {s['cpu_ms']:11.3f} {s['gpu_ms']:12.3f} {s['ideal_ms']:9.3f}"
              f"  {s['best_split']:10s} {s['split_ms']:9.3f} {s['speedup']:8.3f} "
              f"{'-' if reached is None else f'{reached:12.0%}':>12s} {s['overhead_us']:11.0f}"
              f"{'*' if s['overhead_from'] == 'estimate' else ' '}"
              f" {st.get('H@0.9', float('nan')):.3f}, {st.get('OC@0.875', float('nan')):.3f}")
    print("(* estimated from the single-processor times; the rest measured against the parts)")
    print("\nmeasured overhead of each split over the slower of its parts (us; in brackets "
          "with the Python stream functions):")
    for s in result["rows"]:
        python = s.get("measured_overhead_python_streams_us", {})
        cells = "  ".join(f"{k} {v:6.0f}" + (f" [{python[k]:4.0f}]" if k in python else "")
                          for k, v in s["measured_overhead_us"].items())
        print(f"{s['shape']:28s} {cells}")
    print("\neach part alone over its share of the whole op on its processor (GPU, CPU), and "
          "a CPU-bound split over its CPU part + copies at the floor:")
    for s in result["rows"]:
        over = s.get("split_over_cpu_side", {})
        cells = "  ".join(f"{k} {v['gpu']:.2f}, {v['cpu']:.2f}"
                          + (f" [{over[k]:.2f}]" if k in over else "")
                          for k, v in s.get("part_over_share", {}).items())
        print(f"{s['shape']:28s} {cells}")
    for key, title in TWIN_TABLES.items():
        print(f"\n{title}:")
        for s in result["rows"]:
            cells = "  ".join(f"{k} {v:.3f}" for k, v in s.get(key, {}).items())
            print(f"{s['shape']:28s} {cells}")
    print("\nblock copies (codl.copy_block of a row block, median us):")
    for f in result.get("block_copy_floor", []):
        print(f"  {f['mb']:2d} MB {f['direction']:20s}: {f['us']:8.1f} us "
              f"({f['gb_per_s']:.1f} GB/s)")
    print("\ncopy floor (TVM copies, median us):")
    for f in result["copy_floor"]:
        print(f"  {f['mb']:2d} MB {f['memory']:8s} {f['direction']}: {f['us']:8.1f} us "
              f"({f['gb_per_s']:.1f} GB/s)")
    if result["checks"]:
        worst = max(c["rel_error"] for c in result["checks"])
        print(f"\nsplit vs GPU-only outputs on the real devices: worst relative error {worst:.2e}")
