#!/usr/bin/env bash
# The SASS (machine code) of the cuda backend's kernels, read on the dev
# machine, which has nvcc but not cuobjdump: NVIDIA's cuobjdump and
# nvdisasm wheels are fetched from PyPI once into .gpu-tools/ (git-ignored).
# For each kernel of OBJECT (a .o, .so or cubin) whose mangled name matches
# REGEX (an awk extended regular expression): its instruction count and how
# many of them are tensor-core products (HMMA; GMMA: HGMMA, QGMMA),
# asynchronous copies (LDGSTS, UTMALDG), shared-memory matrix loads (LDSM),
# barriers (BAR), shuffles (SHFL) and special functions (MUFU); with -v,
# the instructions themselves.
#
# Why: a decode block on the H200 is bound by the instructions it issues
# (alone it takes ~1 us a tile of 64 keys, however many bytes are in
# flight), so what a kernel's loop issues is worth counting; that is how
# the K/V copies were found to take ~260 of the ~560 instructions of a tile
# (2026-12-02). Registers and spills are in the build's ptxas logs
# (OBJECT.ptxas.log, src/cuda/README.md).
#
#   scripts/gpu/sass.sh build-gpu/src/cuda/CMakeFiles/fa_cuda.dir/decode_bf16.cu.o 'decode_mma_kernel.*Li128'
#   scripts/gpu/sass.sh -v OBJECT REGEX > kernel.sass
set -euo pipefail
verbose=0
if [ "${1:-}" = -v ]; then
  verbose=1
  shift
fi
if [ $# -ne 2 ]; then
  echo "usage: scripts/gpu/sass.sh [-v] OBJECT REGEX" >&2
  exit 2
fi
obj=$1
regex=$2
[ -f "$obj" ] || {
  echo "sass.sh: no file $obj" >&2
  exit 2
}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tools=$root/.gpu-tools
bin=$tools/nvidia/cu13/bin
if [ ! -x "$bin/cuobjdump" ] || [ ! -x "$bin/nvdisasm" ]; then
  mkdir -p "$tools/wheel"
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tools/wheel" \
    'nvidia-cuda-cuobjdump>=13,<14' 'nvidia-cuda-nvdisasm>=13,<14' >&2
  python3 - "$tools" "$tools"/wheel/*.whl <<'EOF'
import sys, zipfile
for w in sys.argv[2:]:
    zipfile.ZipFile(w).extractall(sys.argv[1])
EOF
  chmod +x "$bin/cuobjdump" "$bin/nvdisasm"
fi

PATH=$bin:$PATH "$bin/cuobjdump" -sass "$obj" | awk -v re="$regex" -v verbose="$verbose" '
  function report() {
    if (name == "" || !keep) return
    printf "%s: %d instructions; HMMA %d, GMMA %d, LDGSTS %d, UTMALDG %d, LDSM %d, BAR %d, SHFL %d, MUFU %d\n",
      name, n, c["HMMA"], c["GMMA"], c["LDGSTS"], c["UTMALDG"], c["LDSM"], c["BAR"], c["SHFL"], c["MUFU"]
  }
  /Function : / {
    report()
    name = $NF; keep = name ~ re; n = 0; split("", c)
    if (keep && verbose) print "== " name
    next
  }
  keep && /^ +\/\*[0-9a-f]+\*\// {
    line = $0
    sub(/^ +\/\*[0-9a-f]+\*\/ +/, "", line)
    sub(/ *;.*$/, "", line)
    op = line
    sub(/^@!?U?P[T0-9]+ +/, "", op)
    sub(/[ .].*$/, "", op)
    n++
    if (op ~ /GMMA$/) op = "GMMA" # HGMMA (16-bit), QGMMA (FP8), IGMMA: warpgroup products
    c[op]++
    if (verbose) print "  " line
  }
  END { report() }'
