"""The direct conv's gathered pad pass (``mirror.pad_gathered``) against LLVM's own code.

The rules were read off the Sapphire Rapids assembly of the pad passes of the H100 samples'
sub-ops (the copies of KxK windows, and the samples of 1x1 stride-2 ones,
``cpu_conv.sampled_input``); these tests compile real direct-conv kernels for that CPU and
look for the gathers in the pad pass, so an LLVM that vectorizes it differently fails here,
not in the field.
"""

from __future__ import annotations

import re

import pytest

from codl_tvm.predictor import cpu_terms
from codl_tvm.predictor.machine import reference
from codl_tvm.predictor.mirror import kernel, pad_gathered
from codl_tvm.predictor.opspec import OpSpec
from codl_tvm.tiling import use_variants

TARGET = {"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 16,
          "mtriple": "x86_64-linux-gnu"}  # fmt: skip
M = reference()
PAD_TERM = 11  # cpu_conv's gathered-pad slot (the written bytes beyond the L2s follow it)


def lambdas(asm: str) -> list[str]:
    """The bodies of a kernel's parallel lambdas, in the order the kernel runs them."""
    out: list[list[str]] = []
    inside = False
    for line in asm.split("\n"):
        if re.match(r"^\.L__tvm_parallel_lambda[.0-9]*:", line):
            out.append([])
            inside = True
        elif re.match(r"^[A-Za-z_.][\w.]*:", line) and not line.startswith(".LBB"):
            inside = inside and line.startswith(".L") and not line.startswith(".Lfunc_end")
        elif inside:
            out[-1].append(line)
    return ["\n".join(b) for b in out]


def compiled_pad_gathers(s: OpSpec) -> bool:
    """Whether the compiled direct conv's pad pass (its first parallel loop) gathers."""
    from codl_tvm.schedules import testing

    func = testing.conv2d_func(
        (1, s.IC, s.H, s.W), (s.OC, s.IC, s.KH, s.KW), strides=(s.SH, s.SW),
        padding=(s.pad[0], s.pad[1], s.pad[2], s.pad[3]),
    )
    with use_variants(M.variants):  # the kernels whose widths the rule is given
        lib = testing.build(testing.schedule(func, TARGET), TARGET)
    asm = (lib.mod if hasattr(lib, "mod") else lib).inspect_source("asm")
    parts = lambdas(asm)
    assert len(parts) == 4, "pad, weight pack, conv, unpack"
    return "gather" in parts[0]


CASES = [
    # (H, W, IC, OC, K, stride, pad). Copies (KxK windows): an unpadded 3x3 stride-1 conv
    # keeps every row and column, one at stride 2 on an even input drops the last row
    (7, 7, 32, 64, 3, 1, 0),  # identity, 7 wide: one vector, contiguous
    (8, 8, 32, 64, 3, 1, 0),  # identity, 8 wide: contiguous
    (9, 9, 32, 64, 3, 1, 0),  # identity, 9 wide: gathered
    (17, 17, 32, 64, 3, 1, 0),  # identity, 17 wide: gathered
    (59, 59, 16, 48, 4, 1, 0),  # identity, 59 wide: gathered
    (60, 60, 16, 48, 5, 1, 0),  # identity, 60 wide: too wide to unroll, contiguous
    (10, 10, 32, 64, 3, 2, 0),  # a row and a column dropped, 9 wide: gathered
    (20, 20, 16, 48, 3, 2, 0),  # a row and a column dropped, 19 wide: contiguous
    (16, 16, 32, 64, 3, 2, 0),  # a row and a column dropped, 15 wide: gathered
    (18, 18, 32, 64, 3, 2, 0),  # a row and a column dropped, 17 wide: contiguous
    (5, 3, 32, 64, 2, 2, 0),  # a row and a column dropped, 2 wide: gathered
    (13, 13, 32, 64, 3, 1, 1),  # zero padding: never gathered
    (15, 15, 32, 64, 3, 2, 0),  # 3x3 stride 2 without padding, identity 15 wide: gathered
    # samples (1x1 windows at stride 2, ``cpu_conv.sampled_input``)
    (17, 17, 32, 64, 1, 2, 0),  # 9x9, the input's last row and column unread: gathered
    (18, 18, 32, 64, 1, 2, 0),  # 9x9 ending exactly at the input's end: contiguous
    (16, 16, 32, 64, 1, 2, 0),  # 8x8 ending exactly at the input's end, 8 wide: gathered
    (27, 27, 32, 64, 1, 2, 0),  # 14x14, the input's last row and column unread: gathered
    (1, 10, 32, 64, 1, 2, 0),  # one row (of a one-row part), 5 wide: gathered
    (1, 8, 32, 64, 1, 2, 0),  # one row, 4 wide: contiguous
    (1, 18, 32, 64, 1, 2, 0),  # one row, 9 wide: contiguous
    (37, 37, 16, 48, 1, 2, 0),  # 19 wide + a 9-column tail, 28 in all: contiguous
    (57, 57, 16, 48, 1, 2, 0),  # 29 wide + a 13-column tail, 42 in all: gathered
    (81, 81, 16, 48, 1, 2, 0),  # 41 wide + a 1-column tail: contiguous
]


@pytest.mark.parametrize(("h", "w", "ic", "oc", "k", "st", "p"), CASES)
def test_the_rule_matches_llvms_pad_pass(h: int, w: int, ic: int, oc: int, k: int, st: int,
                                         p: int) -> None:
    s = OpSpec("conv2d", h, w, ic, oc, k, k, st, st, (p,) * 4)
    assert kernel("cpu", s, M).algorithm == "direct-nchwc"
    assert pad_gathered(s, *cpu_terms.direct_padded_in(s, M), M) == compiled_pad_gathers(s)


def test_the_gathered_copy_is_a_term_of_its_own() -> None:
    """The term is the pad pass's elements per core where the pass gathers, 0 elsewhere."""
    gathered = OpSpec("conv2d", 17, 17, 32, 64, 1, 1, 2, 2)
    plain = OpSpec("conv2d", 18, 18, 32, 64, 1, 1, 2, 2)  # 9x9 samples ending at the input's end
    hp, wp = cpu_terms.direct_padded_in(gathered, M)
    assert cpu_terms.cpu_conv(gathered, M)[PAD_TERM] == 32 * hp * wp / M.cores
    assert cpu_terms.cpu_conv(plain, M)[PAD_TERM] == 0.0
