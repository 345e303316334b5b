"""Kernel variants: the compile options that change which kernel (or tile table) a sub-op gets.

Before, three environment switches did this (``CODL_GPU_CONV``, ``CODL_CPU_GEMM``,
``CODL_GPU_WINOGRAD``); they are no longer read. A :class:`KernelVariants` is passed to
``codl_tvm.compile(..., variants=...)``, which schedules inside :func:`use_variants`; it is
recorded in the artifact manifest, and a predictor records the variants its samples were
profiled with (``Machine.variants``), so the predictor's dispatch mirror picks the kernels
that really ran.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

from .gpu_tiles import variant_names

CPU_GEMM_CHOICES = ("measured", "always")
CPU_MATMUL_CHOICES = ("packed", "streamed")
BOOL_FIELDS = ("gpu_winograd", "gpu_prefetch", "cpu_prepack", "cpu_fast_math",
               "cpu_depthwise_blocks", "cpu_gemm_rows", "cpu_winograd_panels", "cpu_gemm_fit",
               "cpu_matmul_rows", "cpu_gemm_in_place", "cpu_depthwise_phases",
               "cpu_winograd_64x64", "cpu_even_tiles", "cpu_vector_tails",
               "cpu_gemv_panels")


@dataclasses.dataclass(frozen=True)
class KernelVariants:
    """Which variant of codl-tvm's kernels to compile.

    Attributes
    ----------
    gpu_conv : str
        Tile table of the ``gpu-conv2d-tiled`` rule (``tiling.VARIANTS``: ``tiled``,
        ``tiled-v1``, ``tiled-64``, ``tiled-128``, ``tiled-nosplitk``), or ``dlight`` to leave
        the GPU conv to DLight's Matmul (the old ``CODL_GPU_CONV``).
    cpu_gemm : str
        ``measured``: the 1x1 GEMM takes the convs its measured predicate gives it (stride 1);
        ``always``: every 1x1 conv, any stride (the old ``CODL_CPU_GEMM=always``).
    gpu_winograd : bool
        The GPU Winograd F(2x2,3x3) rule on (the default) or off (``CODL_GPU_WINOGRAD=0``).
    cpu_matmul : str
        ``packed`` (the default): a CPU matmul of more than a few rows packs its weight into
        panels in the kernel and keeps a register tile over all of K
        (``schedules.cpu_rules.packed_panel``; 2.4-2.6x on transformer dense layers,
        ``benchmarks/cpu_gemm_variants.py``); ``streamed``: every matmul keeps a task's
        accumulator in memory and streams the weight row by row, as a GEMV always does.
    gpu_matmul : str
        Tile table of the ``gpu-matmul-tiled`` rule (the GPU conv's tables, rows on their
        output-channel side), or ``dlight`` to leave matmuls of more than a GEMV's rows to
        DLight's Matmul rule.
    gpu_prefetch : bool
        On (the default): the tiled GEMM (GPU conv, its Winograd GEMMs, GPU matmul) loads the
        next K step's tiles into registers before this step's FMA loop and stores them to
        shared memory after it (``gpu_conv.schedule_conv``; on an H200 1.00-1.53x over 24 conv
        and matmul shapes, geometric mean 1.10x: ``benchmarks/gpu_matmul_variants.py``);
        off: it loads a step's tiles, then computes.
    cpu_prepack : bool
        On (the default): the CPU conv kernels (direct, 1x1 GEMM, Winograd) read a weight
        packed once at compile time where the weight is a constant of the model
        (:class:`codl_tvm.passes.PrepackWeights`); off: they pack it on every call.
    cpu_fast_math : bool
        On (the default): exp, erf, tanh, softmax and GELU placed on the CPU compute TVM's
        vectorizing approximations (``topi.fast_exp`` ...; :mod:`codl_tvm.passes.cpu_fast_math`);
        off: LLVM's scalar library calls, one element at a time.
    cpu_depthwise_blocks : bool
        On (the default): a task of the CPU's grouped/depthwise conv computes a block of
        output rows of one channel (:func:`codl_tvm.tiling.depthwise_rows`), pads the input
        rows it reads and runs the epilogue on its rows while they are in its cache; off: one
        row per task, the input padded and the epilogue run in passes of their own.
    cpu_gemm_rows : bool
        On (the default): on a CPU of 16 vector registers (AVX2, SSE) the 1x1 GEMM's register
        tile is 2 pixel vectors by up to 6 output channels, 12 accumulators
        (:func:`codl_tvm.tiling.gemm_tiles`); off: up to 3 vectors by 3 channels, 9
        accumulators. CPUs of 32 registers (AVX-512, NEON) keep 3 vectors either way.
    cpu_winograd_panels : bool
        On (the default): the CPU Winograd kernel stores its transformed weight and input
        as panels, what one GEMM task streams contiguous (an ``IC x ocb`` weight block of
        one transform element, the ``IC x pt`` tiles it multiplies;
        :func:`codl_tvm.schedules.cpu_winograd.panels`); off: the weight's 16 transform
        elements interleaved, so a task reads one cache line per KiB of it.
    cpu_gemm_fit : bool
        On (the default): the 1x1 GEMM's register tile takes fewer pixel vectors where the
        image's pixels fill those tiles better (:func:`codl_tvm.tiling.fitted_vecs`: 7 x 7
        pixels on AVX-512 compute 64 lanes in tiles of 2 vectors, not 96 in tiles of 3); off:
        as many vectors as the pixels fill, up to the most.
    cpu_matmul_rows : bool
        On (the default): on a CPU of 16 vector registers (AVX2, SSE) the packed matmul's
        register tile is 6 rows by a panel of 2 vectors, 12 accumulators
        (:func:`codl_tvm.schedules.cpu_rules.packed_rows`); off: 4 rows by 4 vectors where N
        allows, 16 accumulators and no register left for loads. CPUs of 32 registers keep
        4 by 4 either way.
    cpu_gemm_in_place : bool
        On (the default): where a stride-1, unpadded 1x1 conv's pixels fill whole register
        tiles and its OC whole blocks (:func:`codl_tvm.tiling.gemm_in_place`), the 1x1 GEMM
        reads its input where it is and writes its output, epilogue included, from the
        registers; off: it packs the input into pixel panels and writes a packed result that
        a pass of its own unpacks.
    cpu_depthwise_phases : bool
        On (the default): at column stride ``s > 1`` the grouped/depthwise conv pads its
        input into ``s`` column phases per row
        (:func:`codl_tvm.schedules.cpu_group_conv.phased_input`), so every window column reads
        whole vectors; off: it reads each vector from a strided row, lane by lane.
    cpu_winograd_64x64 : bool
        On (the default): the CPU's Winograd takes every 3x3 stride-1 conv of at least 64
        channels in and out (:func:`codl_tvm.tiling.winograd_wins`); off: only those with at
        least 64 x 128 (64 to 64 channels run the direct conv).
    cpu_even_tiles : bool
        On (the default): the register tiles of the CPU's direct conv (output columns) and
        Winograd (2x2 tiles) take as few columns or tiles as keep their number of blocks, so
        the blocks share a row or an image evenly (:func:`codl_tvm.tiling.direct_tiles`,
        :func:`~codl_tvm.tiling.winograd_tiles`: 7 columns on 16 registers are 2 blocks of
        4, 16 Winograd tiles on 32 registers 2 blocks of 8); off: as many as the registers
        hold, the last block padded with columns or tiles that are computed and dropped
        (7 columns: 2 blocks of 6, 12 computed; 16 tiles: 2 blocks of 14, 28 computed).
    cpu_vector_tails : bool
        On (the default): a CPU kernel's write-out loop (the unpack, its epilogue inlined)
        whose extent the vector width does not divide is vectorised as whole vectors and
        power-of-two tails (:func:`codl_tvm.schedules.vectors.vectorize_pieces`: a row of 14
        columns on 16 lanes in vectors of 8, 4 and 2); off: it is left to LLVM, which
        vectorised the loop around it with masked gathers and scatters on AVX-512.
    cpu_gemv_panels : bool
        On (the default): a GEMV (at most ``GEMV_MAX_ROWS`` rows) whose weight is a constant
        reads it packed at load into panels of the packed matmul's width, N padded to whole
        panels (:func:`codl_tvm.schedules.cpu_rules.gemv_panel_compute`), so each task
        streams one contiguous panel; off: it reads a run of every row of the ``(K, N)``
        weight. A weight that is not a constant is streamed either way.
    """

    gpu_conv: str = "tiled"
    cpu_gemm: str = "measured"
    gpu_winograd: bool = True
    cpu_matmul: str = "packed"
    gpu_matmul: str = "tiled"
    gpu_prefetch: bool = True
    cpu_prepack: bool = True
    cpu_fast_math: bool = True
    cpu_depthwise_blocks: bool = True
    cpu_gemm_rows: bool = True
    cpu_winograd_panels: bool = True
    cpu_gemm_fit: bool = True
    cpu_matmul_rows: bool = True
    cpu_gemm_in_place: bool = True
    cpu_depthwise_phases: bool = True
    cpu_winograd_64x64: bool = True
    cpu_even_tiles: bool = True
    cpu_vector_tails: bool = True
    cpu_gemv_panels: bool = True

    def __post_init__(self) -> None:
        if self.gpu_conv not in variant_names():
                raise ValueError(f"unknown gpu_conv variant {self.gpu_conv!r}; "
                                 f"known: {variant_names()}")  # fmt: skip
        if self.gpu_matmul not in variant_names():
                raise ValueError(f"unknown gpu_matmul variant {self.gpu_matmul!r}; "
                                 f"known: {variant_names()}")  # fmt: skip
        if self.cpu_gemm not in CPU_GEMM_CHOICES:
            raise ValueError(f"unknown cpu_gemm variant {self.cpu_gemm!r}; "
                             f"known: {list(CPU_GEMM_CHOICES)}")  # fmt: skip
        if self.cpu_matmul not in CPU_MATMUL_CHOICES:
            raise ValueError(f"unknown cpu_matmul variant {self.cpu_matmul!r}; "
                             f"known: {list(CPU_MATMUL_CHOICES)}")  # fmt: skip
        for flag in BOOL_FIELDS:
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be true or false, not {getattr(self, flag)!r}")

    @property
    def is_default(self) -> bool:
        return self == DEFAULT

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any] | None) -> KernelVariants:
        """From :meth:`to_json`'s dict (missing keys: the defaults; None: all defaults)."""
        if not doc:
            return DEFAULT
        if not isinstance(doc, dict):
            raise ValueError(f"kernel variants must be an object, not {doc!r}")
        unknown = set(doc) - set(FIELDS)
        if unknown:
            raise ValueError(f"unknown kernel variants {sorted(unknown)}; known: {list(FIELDS)}")
        return cls(**doc)

    @classmethod
    def from_stored(cls, doc: dict[str, Any] | None) -> KernelVariants:
        """The variants a predictor file or a profile's samples were made with: as
        :meth:`from_json`, except that a field they do not state takes the value of the
        kernels from before it existed (:data:`BEFORE`)."""
        return cls.from_json({**BEFORE, **(doc or {})})

    @classmethod
    def parse(cls, items: Iterable[str]) -> KernelVariants:
        """From ``KEY=VALUE`` texts (the command line's ``--kernel-variant``), e.g.
        ``gpu_conv=tiled-64``, ``cpu_gemm=always``, ``gpu_winograd=off``,
        ``cpu_matmul=packed``."""
        values: dict[str, Any] = {}
        for item in items:
            key, sep, value = item.partition("=")
            key = key.strip().replace("-", "_")
            if not sep or key not in FIELDS:
                raise ValueError(f"kernel variant {item!r}: expected KEY=VALUE with KEY one of "
                                 f"{', '.join(FIELDS)}")  # fmt: skip
            value = value.strip()
            if key in BOOL_FIELDS:
                flag = _BOOLS.get(value.lower())
                if flag is None:
                    raise ValueError(f"kernel variant {item!r}: {key} is on or off")
                values[key] = flag
            else:
                values[key] = value
        return cls(**values)

    def describe(self) -> str:
        """``gpu_conv=tiled,cpu_gemm=measured,gpu_winograd=on`` (for messages)."""
        return ",".join(f"{k}={_text(v)}" for k, v in self.to_json().items())


FIELDS = tuple(f.name for f in dataclasses.fields(KernelVariants))
_BOOLS = {"on": True, "1": True, "true": True, "yes": True,
          "off": False, "0": False, "false": False, "no": False}  # fmt: skip
DEFAULT = KernelVariants()
# what the kernels did before a field existed, for files written then (``from_stored``)
BEFORE: dict[str, Any] = {"cpu_prepack": False, "cpu_depthwise_blocks": False,
                          "cpu_gemm_rows": False, "cpu_winograd_panels": False,
                          "cpu_gemm_fit": False, "cpu_matmul_rows": False,
                          "cpu_gemm_in_place": False, "cpu_depthwise_phases": False,
                          "cpu_winograd_64x64": False, "cpu_even_tiles": False,
                          "cpu_vector_tails": False, "cpu_gemv_panels": False}
# the environment switches that chose these before; no longer read (``compile`` warns if set)
OLD_ENV_SWITCHES = {"CODL_GPU_CONV": "gpu_conv", "CODL_CPU_GEMM": "cpu_gemm",
                    "CODL_GPU_WINOGRAD": "gpu_winograd"}  # fmt: skip

_stack: list[KernelVariants] = []


def _text(v: Any) -> str:
    return ("on" if v else "off") if isinstance(v, bool) else str(v)


def current_variants() -> KernelVariants:
    """The variants the schedules use now: the innermost :func:`use_variants`, else defaults."""
    return _stack[-1] if _stack else DEFAULT


@contextlib.contextmanager
def use_variants(
    variants: KernelVariants | None = None, **changes: Any
) -> Iterator[KernelVariants]:
    """Schedule with ``variants`` (default: the current ones), with ``changes`` applied, inside
    the ``with`` block."""
    v = variants if variants is not None else current_variants()
    if changes:
        v = dataclasses.replace(v, **changes)
    _stack.append(v)
    try:
        yield v
    finally:
        _stack.pop()
