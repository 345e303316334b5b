#!/usr/bin/env bash
# Time every planner strategy on every built model on the H100 machine (runtime-only TVM).
#
# Here (full TVM), see benchmarks/BENCH.md:
#   ../shared/gpu/pack-tvm-runtime.sh .devcarry
#   python benchmarks/bench_models.py build --predictor predictor-x86-cuda.json \
#       -o /tmp/bench --pack .devcarry/bench.tgz
# There (device tool, carry .devcarry):  bash benchmarks/run_bench_h100.sh
#   (BENCH_TGZ names another pack; TVM_BIND_THREADS=0 in the environment unpins TVM's CPU pool)
# Writes $OUT/bench-h100.json (rows per model) and, when the oracle bundle is in the pack and
# not measured yet, $OUT/oracle-samples.csv for `build --oracle-samples`.
set -euo pipefail
OUT=${OUT:-$PWD/out}
BENCH_DEADLINE_S=${BENCH_DEADLINE_S:-240}
ORACLE_DEADLINE_S=${ORACLE_DEADLINE_S:-120}
mkdir -p "$OUT" /tmp/site /tmp/benchroot
tar xzf .devcarry/tvm-runtime.tgz -C /tmp/site
rm -rf /tmp/benchroot/bench
tar xzf "${BENCH_TGZ:-.devcarry/bench.tgz}" -C /tmp/benchroot
export PYTHONPATH=/tmp/site:$PWD TVM_USE_RUNTIME_LIB=1 PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used --format=csv,noheader; \
  lscpu | head -20; } > "$OUT/machine.txt" 2>&1 || true
if [ -d /tmp/benchroot/bench/oracle-bundle ]; then
  python3 codl_tvm/profiler/bundle_runner.py /tmp/benchroot/bench/oracle-bundle \
    -o "$OUT/oracle-samples.csv" --deadline-s "$ORACLE_DEADLINE_S" --max-call-s 2 \
    --warm-jobs 14 --rounds "${ORACLE_ROUNDS:-1}" \
    > "$OUT/oracle-runner.log" 2>&1 || echo "oracle bundle: see oracle-runner.log"
fi
[ "$BENCH_DEADLINE_S" = 0 ] && exit 0  # oracle measurements only
python3 benchmarks/bench_models.py run /tmp/benchroot/bench -o "$OUT/bench-h100.json" \
  --deadline-s "$BENCH_DEADLINE_S" --jobs 14 2>&1 | tee "$OUT/bench.log"
