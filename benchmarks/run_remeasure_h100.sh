#!/usr/bin/env bash
# Re-measure a bundle of existing sample rows on the H100 machine, resumable across calls.
#
# Here (full TVM): python benchmarks/remeasure_bundle.py bundle SAMPLES --role R \
#                      --algorithms A,B,... -o .devcarry/NAME-bundle
# There (device tool, carry .devcarry/tvm-runtime.tgz and the bundle):
#   NAME=cpu16 bash benchmarks/run_remeasure_h100.sh
# A call cut by DEADLINE_S keeps what it measured: copy $OUT/NAME.csv and NAME.csv.rounds.jsonl
# into .devcarry/NAME-part/ and call again (same lease: CPU speed differs between leases).
# Here: python benchmarks/remeasure_bundle.py merge SAMPLES NAME.csv -o SAMPLES
set -euo pipefail
OUT=${OUT:-$PWD/out}
NAME=${NAME:?NAME of the bundle: .devcarry/NAME-bundle}
source benchmarks/h100_env.sh  # runtime-only TVM, PYTHONPATH, $OUT/machine.txt
if [ -d ".devcarry/$NAME-part" ]; then cp ".devcarry/$NAME-part/"* "$OUT/"; fi
python3 codl_tvm/profiler/bundle_runner.py ".devcarry/$NAME-bundle" -o "$OUT/$NAME.csv" \
  --rounds "${ROUNDS:-12}" --repeats 3 --min-repeat-ms 10 --max-call-s 3 \
  --deadline-s "${DEADLINE_S:-480}" --warm-jobs 14 | tee "$OUT/$NAME-runner.log"
