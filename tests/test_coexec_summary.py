"""What a split adds to its parts (benchmarks/coexec_summary.py): the CPU part's artifact keeps
its input and output on the CPU, so its copies at the measured pinned bandwidth count on its
side, as the overhead target has them; twins of a split give ratios, not splits."""

from __future__ import annotations

import pytest

from tests.helpers import load_benchmark

SHAPE = {"h": 104, "w": 104, "ic": 64, "oc": 128, "kh": 3, "kw": 3, "sh": 1, "sw": 1}
FLOOR = [{"mb": 8, "memory": "pinned", "direction": "d2h", "gb_per_s": 50.0},
         {"mb": 8, "memory": "pinned", "direction": "h2d", "gb_per_s": 40.0}]


def _rows(latency_ms: dict[str, float]) -> list[dict]:
    return [{"shape": "s", "variant": v, "latency_ms": ms} for v, ms in latency_ms.items()]


def test_the_cpu_parts_copies_count_on_its_side():
    summary = load_benchmark("coexec_summary")
    # 30% of 104 output rows (31.2) and a 2-row halo in, their 128 channels out
    bytes_in, bytes_out = 4 * (0.3 * 104 + 2) * 104 * 64, 4 * 0.3 * 104 * 104 * 128
    copies_ms = (bytes_in / 50.0 + bytes_out / 40.0) / 1e6
    assert summary.cpu_copies_ms(SHAPE, "H@0.7", FLOOR) == pytest.approx(copies_ms)
    rows = _rows({"cpu-only": 1.0, "gpu-only": 0.5, "H@0.7": 0.45, "OC@0.75": 0.6,
                  "H@0.7/python-streams": 0.47, "gpu-part:H@0.7": 0.3, "cpu-part:H@0.7": 0.3})
    s = summary.summarize(rows, SHAPE, FLOOR)
    assert s["measured_overhead_us"]["H@0.7"] == pytest.approx(1e3 * (0.45 - 0.3 - copies_ms))
    assert s["measured_overhead_python_streams_us"]["H@0.7"] == pytest.approx(
        1e3 * (0.47 - 0.3 - copies_ms))
    assert s["best_split"] == "H@0.7"  # the twin is a ratio, not a split of its own
    assert s["native_over_python_streams"] == {"H@0.7": pytest.approx(0.45 / 0.47)}
    # each part over its share of its processor's whole op; the CPU side (part + copies) is
    # the long pole here, so the split is also priced against it
    assert s["part_over_share"]["H@0.7"] == {"gpu": pytest.approx(0.3 / (0.7 * 0.5)),
                                             "cpu": pytest.approx(0.3 / (0.3 * 1.0))}
    assert s["split_over_cpu_side"] == {"H@0.7": pytest.approx(0.45 / (0.3 + copies_ms))}


def test_without_a_cuda_floor_copies_are_free_and_without_a_shape_nothing_is_measured():
    summary = load_benchmark("coexec_summary")
    assert summary.cpu_copies_ms(SHAPE, "OC@0.75", []) == 0.0
    rows = _rows({"cpu-only": 1.0, "gpu-only": 0.5, "OC@0.75": 0.4, "H@0.5": 0.7,
                  "gpu-part:OC@0.75": 0.35, "cpu-part:OC@0.75": 0.2})
    assert summary.summarize(rows)["measured_overhead_us"] == {}
    assert summary.summarize(rows, SHAPE, [])["measured_overhead_us"]["OC@0.75"] == \
        pytest.approx(50.0)


def test_the_copy_bound_is_the_ideal_when_copies_are_free_and_above_it_when_not():
    summary = load_benchmark("coexec_summary")
    cpu_ms, gpu_ms = 1.0, 0.5
    ideal = 1 / (1 / cpu_ms + 1 / gpu_ms)
    free, _ = summary.copy_bound(SHAPE, cpu_ms, gpu_ms, floor=[])  # no CUDA: copies free
    assert free == pytest.approx(ideal, rel=0.01)
    bound, split = summary.copy_bound(SHAPE, cpu_ms, gpu_ms, FLOOR)
    assert ideal < bound < min(cpu_ms, gpu_ms)
    # at the bound's share the CPU side, copies included, meets the GPU part
    r = float(split.partition("@")[2])
    cpu_side = cpu_ms * (1 - r) + summary.cpu_copies_ms(SHAPE, split, FLOOR)
    assert max(gpu_ms * r, cpu_side) == pytest.approx(bound)
    assert abs(gpu_ms * r - cpu_side) <= 0.005 * (cpu_ms + gpu_ms) + 1e-3
    # a bus too slow for any split to pay leaves the better single processor
    slow = [dict(f, gb_per_s=0.001) for f in FLOOR]
    assert summary.copy_bound(SHAPE, cpu_ms, gpu_ms, slow) == (gpu_ms, "")
