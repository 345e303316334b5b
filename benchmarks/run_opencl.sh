#!/usr/bin/env bash
# The OpenCL path on the GPU machine: NVIDIA's OpenCL (registered for the process only) and PoCL
# (the machine's registered CPU OpenCL, which shares the CPU's memory as a phone's GPU does).
# Prepare here (full TVM), see docs/DEPLOY.md "OpenCL on a Linux host":
#   ../shared/gpu/pack-tvm-runtime.sh .devcarry
#   tools/opencl-runtime/build.sh --pack-sources .devcarry/opencl-src.tgz
#   python benchmarks/opencl_verify.py build -o /tmp/opencl && tar czf .devcarry/opencl.tgz -C /tmp opencl
# There (device tool; carry .devcarry/{tvm-runtime,opencl-src,opencl}.tgz):
#   bash benchmarks/run_opencl.sh verify nvidia|pocl [MODELS [PLANS]]  -> $OUT/opencl-{nvidia,pocl}.json
#   bash benchmarks/run_opencl.sh sharing                      -> $OUT/sharing-*.json
# Back here: python benchmarks/opencl_verify.py report OUT/opencl-*.json
set -euo pipefail
STAGE=$1
OUT=${OUT:-/tmp/codl-out}
mkdir -p "$OUT" /tmp/site /tmp/work /tmp/ocl-src
tar xzf .devcarry/tvm-runtime.tgz -C /tmp/site
export PYTHONPATH=/tmp/site:$PWD TVM_USE_RUNTIME_LIB=1 PYTHONUNBUFFERED=1
export POCL_CACHE_DIR=/tmp/pocl-cache

# the OpenCL runtime plugin, built here from the carried sources (the script is the record)
tar xzf .devcarry/opencl-src.tgz -C /tmp/ocl-src
export CODL_TVM_OPENCL_RUNTIME=/tmp/ocl-runtime
PYTHON=python3 tools/opencl-runtime/build.sh --tvm-src /tmp/ocl-src/tvm-src \
  --opencl-headers /tmp/ocl-src/opencl-headers -o $CODL_TVM_OPENCL_RUNTIME --overwrite

# one ICD per process: NVIDIA's library is installed but not registered
mkdir -p /tmp/icd-nvidia /tmp/icd-pocl
echo libnvidia-opencl.so.1 > /tmp/icd-nvidia/nvidia.icd
cp /etc/OpenCL/vendors/pocl.icd /tmp/icd-pocl/ 2>/dev/null || echo "no PoCL registered here"
icd() { case $1 in nvidia) echo /tmp/icd-nvidia ;; pocl) echo /tmp/icd-pocl ;; esac; }

case $STAGE in
verify)  # $2: nvidia or pocl; $3: models (default: all seven); $4: plans (default: all)
  tar xzf .devcarry/opencl.tgz -C /tmp/work
  DEV=$2
  LABEL=$([ "$DEV" = nvidia ] && echo nvidia-opencl || echo pocl)
  JOBS=$([ "$DEV" = nvidia ] && echo 4 || echo 7)  # PoCL compiles each kernel on one core
  LIMIT=${VERIFY_TIMEOUT:-560}
  OCL_ICD_VENDORS=$(icd "$DEV") timeout "$LIMIT" python3 benchmarks/opencl_verify.py run \
    /tmp/work/opencl --device "$LABEL" ${3:+--models "$3"} ${4:+--plans "$4"} --jobs "$JOBS" --timeout $((LIMIT - 20)) \
    -o "$OUT/opencl-$DEV.json" || echo "verify $DEV: not all ok" ;;
sharing)
  for DEV in pocl nvidia; do
    for B in default host-ptr; do
      OCL_ICD_VENDORS=$(icd "$DEV") timeout 120 python3 benchmarks/opencl_sharing.py \
        --device "$([ $DEV = nvidia ] && echo nvidia-opencl || echo pocl)" --buffers "$B" \
        -o "$OUT/sharing-$DEV-$B.json" | tail -8 || echo "sharing $DEV $B failed"
    done
  done
  timeout 120 python3 benchmarks/opencl_sharing.py --device cuda -o "$OUT/sharing-cuda.json" \
    | tail -8 || echo "sharing cuda failed" ;;
*) echo "run_opencl.sh: unknown stage $STAGE (verify, sharing)" >&2; exit 1 ;;
esac
