#!/usr/bin/env bash
# Build TVM's OpenCL runtime as a plugin library for the installed apache-tvm wheel.
#
# The PyPI wheel of TVM 0.27 has no OpenCL runtime (USE_OPENCL=OFF); its CUDA runtime is a
# plugin library beside libtvm_runtime.so. This builds the OpenCL one the same way upstream's
# cmake/modules/OpenCL.cmake does (target tvm_runtime_opencl, the dlopen-ing OpenCL wrapper):
# apache/tvm's src/backend/opencl/runtime sources, compiled against the wheel's own headers
# (include/tvm/runtime and src/runtime, which the wheel ships) and linked to its
# libtvm_runtime.so. codl_tvm.opencl loads it (see docs/DEPLOY.md, "OpenCL on a Linux host").
#
#   tools/opencl-runtime/build.sh [-o OUT] [--tvm-src DIR] [--opencl-headers DIR] [--overwrite]
#   tools/opencl-runtime/build.sh --pack-sources FILE.tgz [--tvm-src DIR] [--opencl-headers DIR]
#       (the sources it needs, ~1 MiB, for a machine without git access: there, untar and pass
#        --tvm-src tvm-src --opencl-headers opencl-headers)
#
# OUT (default ~/.cache/codl-tvm/opencl/<apache-tvm version>) receives
#   libtvm_runtime_opencl.so            buffers in device memory (upstream's default)
#   libtvm_runtime_opencl-host-ptr.so   buffers allocated in host memory (OPENCL_ENABLE_HOST_PTR)
#   build-info.json                     versions, commits and compiler of the build
# It is built in a temporary sibling and renamed into place; an existing OUT is replaced only
# when it holds a build of this script (its build-info.json) and --overwrite is given.
# Without --tvm-src / --opencl-headers the pinned commits below are cloned from GitHub.
# Needs: g++ (C++17), git (unless both source folders are given), the wheel in $PYTHON.
set -euo pipefail

TVM_COMMIT=5d4dc8721307cf9677becacf0395c19be130e206  # last commit of the mirror used; the
# wheel's commit (0.27.0.post1, g7b5acb32b) is on a release branch: the runtime sources are
# taken from here and every header the wheel ships (the ABI) from the wheel
HEADERS_COMMIT=b590a6bfe034ea3a418b7b523e3490956bcb367a  # apache/tvm's 3rdparty/OpenCL-Headers
PYTHON=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)

out="" tvm_src="" headers="" overwrite=0 pack=""
while [ $# -gt 0 ]; do
  case "$1" in
    -o|--output) out=$2; shift 2 ;;
    --tvm-src) tvm_src=$2; shift 2 ;;
    --opencl-headers) headers=$2; shift 2 ;;
    --overwrite) overwrite=1; shift ;;
    --pack-sources) pack=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build.sh: unknown argument $1 (see --help)" >&2; exit 1 ;;
  esac
done

work=$(mktemp -d)
stage=""
trap 'rm -rf "$work" ${stage:+"$stage"}' EXIT

fetch_commit() {  # URL COMMIT DEST: one commit's tree, without history
  git init -q "$3" && git -C "$3" fetch -q --depth 1 "$1" "$2" && git -C "$3" checkout -q FETCH_HEAD
}
if [ -z "$tvm_src" ]; then
  tvm_src=$work/tvm-src
  fetch_commit https://github.com/apache/tvm "$TVM_COMMIT" "$tvm_src"
fi
if [ -z "$headers" ]; then
  headers=$work/opencl-headers
  fetch_commit https://github.com/KhronosGroup/OpenCL-Headers "$HEADERS_COMMIT" "$headers"
fi
[ -f "$headers/CL/cl.h" ] || { echo "build.sh: no CL/cl.h under $headers" >&2; exit 1; }
[ -d "$tvm_src/src/backend/opencl/runtime" ] || {
  echo "build.sh: no src/backend/opencl/runtime under $tvm_src" >&2; exit 1; }
if [ -n "$pack" ]; then
  [ -e "$pack" ] && { echo "build.sh: $pack exists; choose another file" >&2; exit 1; }
  p=$work/pack
  mkdir -p "$p/tvm-src/include/tvm" "$p/tvm-src/src/backend" "$p/opencl-headers"
  cp -r "$tvm_src/src/backend/opencl" "$p/tvm-src/src/backend/"
  cp -r "$tvm_src/src/support" "$p/tvm-src/src/"
  cp -r "$tvm_src/include/tvm/support" "$p/tvm-src/include/tvm/"
  cp -r "$headers/CL" "$p/opencl-headers/"
  tar czf "$work/pack.tgz" -C "$p" tvm-src opencl-headers && mv "$work/pack.tgz" "$pack"
  echo "wrote $pack"; exit 0
fi

read -r tvm_dir ffi_dir tvm_version <<<"$("$PYTHON" - <<'EOF'
import importlib.metadata as m, importlib.util as u, os
tvm = os.path.dirname(u.find_spec("tvm").origin)
ffi = os.path.dirname(u.find_spec("tvm_ffi").origin)
print(tvm, ffi, m.version("apache-tvm"))
EOF
)"
out=${out:-$HOME/.cache/codl-tvm/opencl/$tvm_version}
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  if [ ! -f "$out/build-info.json" ]; then
    echo "build.sh: $out exists and is not a build of this script; choose another -o" >&2; exit 1
  elif [ "$overwrite" != 1 ]; then
    echo "build.sh: $out already holds a build; pass --overwrite to replace it" >&2; exit 1
  fi
fi
mkdir -p "$(dirname "$out")"
stage=$(mktemp -d "$out.tmp.XXXXXX")
chmod 755 "$stage"

# the wheel's runtime internals (exactly its version), the OpenCL sources beside them
tree=$work/tree
mkdir -p "$tree/src/backend" "$tree/include/tvm"
cp -r "$tvm_dir/src/runtime" "$tree/src/"
cp -r "$tvm_src/src/backend/opencl" "$tree/src/backend/"
cp -r "$tvm_src/src/support" "$tree/src/"
cp -r "$tvm_src/include/tvm/support" "$tree/include/tvm/"
for p in "$here"/*.patch; do patch -s -d "$tree" -p1 < "$p"; done  # what each does: README.md

flags=(-std=c++17 -O2 -fPIC -fvisibility=hidden -DNDEBUG
       "-DDMLC_USE_LOGGING_LIBRARY=<tvm/runtime/logging.h>"
       -I"$tvm_dir/include" -I"$tree/include" -I"$ffi_dir/include"
       -I"$ffi_dir/3rdparty/dlpack/include" -isystem "$headers")
sources=("$tree"/src/backend/opencl/runtime/*.cc
         "$tree/src/backend/opencl/runtime/opencl_wrapper/opencl_wrapper.cc")
libs=(-L"$tvm_dir/lib" -ltvm_runtime -L"$ffi_dir/lib" -ltvm_ffi -ldl -Wl,--no-undefined)
for variant in default host-ptr; do
  extra=() name=libtvm_runtime_opencl.so
  if [ $variant = host-ptr ]; then extra=(-DOPENCL_ENABLE_HOST_PTR); name=libtvm_runtime_opencl-host-ptr.so; fi
  mkdir -p "$work/obj-$variant"
  pids=()
  for s in "${sources[@]}"; do
    g++ "${flags[@]}" "${extra[@]}" -c "$s" -o "$work/obj-$variant/$(basename "$s" .cc).o" & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  g++ -shared "$work/obj-$variant"/*.o "${libs[@]}" -o "$stage/$name"
done

"$PYTHON" - "$stage/build-info.json" "$tvm_version" "$TVM_COMMIT" "$HEADERS_COMMIT" <<'EOF'
import json, subprocess, sys
path, version, tvm_commit, headers_commit = sys.argv[1:]
gxx = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
json.dump({"apache_tvm": version, "tvm_sources_commit": tvm_commit,
           "opencl_headers_commit": headers_commit, "compiler": gxx,
           "libraries": {"default": "libtvm_runtime_opencl.so",
                         "host-ptr": "libtvm_runtime_opencl-host-ptr.so"}},
          open(path, "w"), indent=1)
EOF

if [ -d "$out" ] && [ -z "$(ls -A "$out")" ]; then  # an empty folder the user made: fill it
  mv "$stage"/* "$out"/
elif [ -e "$out" ]; then  # only a build of this script, with --overwrite (checked above)
  old=$(mktemp -d "$out.old.XXXXXX")
  mv "$out" "$old/build" && mv "$stage" "$out" && rm -rf "$old"
else
  mv "$stage" "$out"
fi
echo "wrote $out (apache-tvm $tvm_version)"
