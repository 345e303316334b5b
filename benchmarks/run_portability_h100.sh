#!/usr/bin/env bash
# Blind accuracy of quick-profile predictors on the GPU machine (benchmarks/PORTABILITY.md):
# every bundle of .devcarry/portability.tgz measured in one configuration of the x86-cuda pair.
#   bash benchmarks/run_portability_h100.sh full|edge [BUNDLE...]   (default: every bundle)
# Here first (full TVM; the bundles' names are the result files' names):
#   ../shared/gpu/pack-tvm-runtime.sh .devcarry
#   P="--pair x86-cuda --arch sm_90 --mcpu sapphirerapids --num-cores 16"
#   codl-tvm profile-bundle $P --quick -o /tmp/portability/quick
#   codl-tvm profile-bundle $P --workload benchmarks/results/blind-h200/blind-conv2d.csv \
#       --shares 0.2,0.5,1.0 --no-sharing -o /tmp/portability/blind1
#   codl-tvm profile-bundle $P --workload benchmarks/results/portability/blind2-conv2d.csv \
#       --shares 0.2,0.5,1.0 --no-sharing -o /tmp/portability/blind2
#   tar czf .devcarry/portability.tgz -C /tmp portability
# There (device tool, carry .devcarry/tvm-runtime.tgz and .devcarry/portability.tgz), one call
# per configuration; every bundle gets DEADLINE_S (default 110 s) of visits:
#   -> $OUT/BUNDLE-{full,edge}.csv and their .machine.json (the facts the runner detected)
# Back here: codl-tvm train quick-full.csv -o pred.json; codl-tvm report --json pred.json
#   blind1-full.csv (PORTABILITY.md "Remake").
set -euo pipefail
ON=$1; shift
BUNDLES=${*:-$(tar tzf .devcarry/portability.tgz | awk -F/ 'NF>2 && $2!="" {print $2}' | sort -u)}
OUT=${OUT:-/tmp/codl-out}
DEADLINE_S=${DEADLINE_S:-110}
source benchmarks/h100_env.sh
mkdir -p /tmp/work
tar xzf .devcarry/portability.tgz -C /tmp/work
run_all() {
  for b in $BUNDLES; do
    dir=/tmp/work/portability/$b
    timeout $((DEADLINE_S + 60)) python3 codl_tvm/profiler/bundle_runner.py "$dir" \
      -o "$OUT/$b-$ON.csv" --deadline-s "$DEADLINE_S" --rounds 3 --min-repeat-ms 10 \
      --max-call-s 2 --warm-jobs 14 2>&1 | tail -2 || echo "$b-$ON failed"
  done
}
case $ON in
full) run_all ;;
edge) OUT=$OUT bash benchmarks/edge_gpu.sh "${MPS_PERCENT:-5}" bash -c "$(declare -f run_all); \
  ON=$ON OUT=$OUT DEADLINE_S=$DEADLINE_S BUNDLES='$BUNDLES' run_all" ;;
*) echo "usage: $0 full|edge" >&2; exit 1 ;;
esac
