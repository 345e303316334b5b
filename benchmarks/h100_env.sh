# Sourced by the run_*_h100.sh scripts on the device machine, in the repo root, with $OUT set:
# unpacks the runtime-only TVM carried in .devcarry (../shared/gpu/pack-tvm-runtime.sh), puts it
# and this repo on PYTHONPATH, and records the machine in $OUT/machine.txt.
mkdir -p "$OUT" /tmp/site
tar xzf .devcarry/tvm-runtime.tgz -C /tmp/site
export PYTHONPATH=/tmp/site:$PWD TVM_USE_RUNTIME_LIB=1 PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader; lscpu | head -20; } \
  > "$OUT/machine.txt" 2>&1 || true
