#!/usr/bin/env bash
# CPU Winograd before / after skewing the V planes off the L1 set span, in one device call,
# plus the GPU shapes that test two model terms (tiled conv output-plane parity, pool bytes
# beyond half the L2). Old and new kernels run one after another, twice the old one, so a
# drift of the lease's speed shows as old1 != old2.
#
# Here:   python benchmarks/remeasure_bundle.py bundle \
#             benchmarks/results/noise-probe-h100/lease-d-t16.csv --role cpu \
#             --algorithms winograd-2x2-3x3,direct-nchwc -o .devcarry/probe7-bundle   # new kernel
#         (.devcarry/probe6-bundle: the same rows built by session 6's kernel)
#         python benchmarks/remeasure_bundle.py bundle GPU_EXP.csv --role gpu \
#             --algorithms gpu-conv-tiled,pool -o .devcarry/gpuexp7-bundle
# There:  bash benchmarks/run_winograd_planes_h100.sh   (carry .devcarry/tvm-runtime.tgz and
#         the three bundles)
# Back:   python benchmarks/winograd_planes.py OUT/old1.csv OUT/new.csv OUT/old2.csv --json ...
set -euo pipefail
OUT=${OUT:-$PWD/out}
ROUNDS=${ROUNDS:-12}
source benchmarks/h100_env.sh  # runtime-only TVM, PYTHONPATH, $OUT/machine.txt
run() {  # bundle, output, deadline
  python3 codl_tvm/profiler/bundle_runner.py "$1" -o "$OUT/$2" --rounds "$ROUNDS" --repeats 3 \
    --min-repeat-ms 10 --warm-jobs 14 --deadline-s "$3" | tail -2
}
run .devcarry/probe6-bundle old1.csv 60
run .devcarry/probe7-bundle new.csv 60
run .devcarry/probe6-bundle old2.csv 60
run .devcarry/gpuexp7-bundle gpuexp.csv 150
