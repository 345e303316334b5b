#!/usr/bin/env bash
# CPU timing noise on the H100 machine: benchmarks/noise_probe.py under several thread setups.
#
# Here:   python benchmarks/noise_probe.py select .devcarry/recpu-bundle \
#             codl_tvm/data/samples-x86-cuda-h100.csv -o .devcarry/recpu-bundle/probe.json
# There:  bash benchmarks/run_noise_probe_h100.sh   (carry .devcarry/tvm-runtime.tgz and
#         .devcarry/recpu-bundle; env VARIANTS, VISITS)
# Back:   python benchmarks/noise_probe.py summary probe-<variant>.jsonl
set -euo pipefail
OUT=${OUT:-$PWD/out}
VISITS=${VISITS:-8}
# name:TVM_NUM_THREADS:TVM_BIND_THREADS:pin-master ("-": leave the calling thread free)
VARIANTS=${VARIANTS:-"t16:16:1:- t16pin0:16:1:0 t15pin0:15:1:0 t15:15:1:- t8pin0:8:1:0 t16nobind:16:0:-"}
source benchmarks/h100_env.sh  # runtime-only TVM, PYTHONPATH, $OUT/machine.txt
for v in $VARIANTS; do
  IFS=: read -r name t b pin <<< "$v"
  extra=(); [ "$pin" != "-" ] && extra=(--pin-master "$pin")
  echo "== $name"
  TVM_NUM_THREADS=$t TVM_BIND_THREADS=$b python3 benchmarks/noise_probe.py run \
    .devcarry/recpu-bundle --select .devcarry/recpu-bundle/probe.json --modes fresh10 \
    --visits "$VISITS" -o "$OUT/probe-$name.jsonl" "${extra[@]}" | tail -1
done
