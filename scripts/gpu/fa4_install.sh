#!/usr/bin/env bash
# Runs on the GPU machine (the device tool's `run`, in the repository root):
# installs FlashAttention 4 from the wheels that scripts/gpu/fa4_wheels.sh
# packed on the dev machine into .gpu-wheels-1/ and .gpu-wheels-2/ (too big
# for one call's carry), in two calls on the same warm machine:
#
#   call 1, carry [".gpu-wheels-1"]:   bash scripts/gpu/fa4_install.sh stage
#   call 2, carry [".gpu-wheels-2", ...]: bash scripts/gpu/fa4_install.sh install
#
# stage copies whichever of the two folders is here into /tmp/fa4-stage/
# (outside the work tree, which is laid anew each call; /tmp survives while
# the machine stays warm). install does the same, joins the split wheel's
# parts, checks every wheel against wheels.sha256, and installs them all with
# `pip install --no-deps --target /tmp/fa4` (or unzips them where there is no
# pip). Then, for bench/gpu/anchors.py --fa4:
#   PYTHONPATH=/tmp/fa4:/tmp/fa4/nvidia_cutlass_dsl/dsl_packages
# (the second is what the wheel's nvidia_cutlass_dsl_packages.pth would add;
# .pth files are not read from PYTHONPATH folders).
#
# The whole recipe (FA4 next to SDPA FLASH / cuDNN and flashattn in bench/gpu/anchors.py):
#   here:    bash scripts/gpu/fa4_wheels.sh      (.gpu-wheels-1 ~54 MiB, .gpu-wheels-2 ~44 MiB)
#            bash scripts/gpu/prebuild.sh notests  (.gpu-build.tar.xz, ~6 MiB; as for run.sh bench)
#   device call 1, carry [".gpu-wheels-1"]:
#            bash scripts/gpu/fa4_install.sh stage
#   device call 2 (same warm machine), carry [".gpu-deps", ".gpu-wheels-2", ".gpu-build.tar.xz"]:
#            bash scripts/gpu/fa4_install.sh install && . scripts/gpu/summary.sh &&
#            extract "$ROOT/.gpu-build.tar.xz" build-gpu &&
#            PYTHONPATH=/tmp/fa4:/tmp/fa4/nvidia_cutlass_dsl/dsl_packages timeout 480 python3 bench/gpu/anchors.py
#            --lib build-gpu/libflashattn.so --fa4 --out "$OUT" --d 64,128 --l 4096,16384 --reps 10 2>&1 |
#            tee "$OUT/anchors-fa4.txt"
# A later call on the same warm machine needs neither wheels folder again
# (/tmp/fa4 stays): the PYTHONPATH above suffices. FA4's kernels JIT-compile
# on their first call per configuration (anchors.py prints the seconds).
set -euo pipefail
MODE=${1:-}
STAGE=/tmp/fa4-stage
TARGET=/tmp/fa4
PYPATH=$TARGET:$TARGET/nvidia_cutlass_dsl/dsl_packages
case $MODE in
  stage | install) ;;
  *)
    echo "usage: bash scripts/gpu/fa4_install.sh stage|install" >&2
    exit 2
    ;;
esac

mkdir -p "$STAGE"
found=0
for d in .gpu-wheels-1 .gpu-wheels-2; do
  if [ -d "$d" ]; then
    cp -f "$d"/* "$STAGE/"
    found=1
    echo "fa4: staged $d ($(du -sh "$d" | cut -f1)) into $STAGE"
  fi
done
if [ "$found" = 0 ] && [ "$MODE" = stage ]; then
  echo "fa4: neither .gpu-wheels-1 nor .gpu-wheels-2 is here: carry one of them (bash scripts/gpu/fa4_wheels.sh makes them)" >&2
  exit 1
fi
if [ "$MODE" = stage ]; then
  ls -la "$STAGE"
  exit 0
fi

cd "$STAGE"
if [ ! -f wheels.sha256 ] || [ ! -f parts.txt ]; then
  echo "fa4: no manifest (wheels.sha256, parts.txt) in $STAGE: carry .gpu-wheels-1 (call 1, stage) and .gpu-wheels-2 (this call)" >&2
  exit 1
fi
# join the split wheel(s): parts.txt lists "PART FOLDER", in order
missing=0
while read -r part folder; do
  if [ ! -f "$part" ]; then
    echo "fa4: MISSING PART $part (from $folder): run 'bash scripts/gpu/fa4_install.sh stage' with carry [\"$folder\"] first, on the same warm machine (/tmp/fa4-stage is lost when the machine goes back)" >&2
    missing=1
  fi
done <parts.txt
[ "$missing" = 0 ] || exit 1
mapfile -t split_wheels < <(cut -d' ' -f1 parts.txt | sed 's/\.part-[0-9]*$//' | sort -u)
for whl in "${split_wheels[@]}"; do
  mapfile -t parts < <(cut -d' ' -f1 parts.txt | grep -F "$whl.part-" | sort)
  cat "${parts[@]}" >"$whl"
  echo "fa4: joined $whl from ${#parts[@]} parts ($(du -h "$whl" | cut -f1))"
done
if ! sha256sum -c --quiet wheels.sha256; then
  echo "fa4: a wheel does not match wheels.sha256 (a part from another fa4_wheels.sh run?): run fa4_wheels.sh again and stage again" >&2
  exit 1
fi
echo "fa4: $(wc -l <wheels.sha256) wheels verified"
mapfile -t wheels < <(cut -d' ' -f3 wheels.sha256)
rm -rf "$TARGET"
if python3 -m pip --version >/dev/null 2>&1; then
  python3 -m pip install -q --no-deps --no-index --disable-pip-version-check --target "$TARGET" "${wheels[@]}"
else
  echo "fa4: no pip for python3: unzipping the wheels into $TARGET"
  python3 -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' "$TARGET" "${wheels[@]}"
fi
if [ ! -d "$TARGET/nvidia_cutlass_dsl/dsl_packages/cutlass" ]; then
  echo "fa4: $TARGET/nvidia_cutlass_dsl/dsl_packages/cutlass is missing after the install" >&2
  exit 1
fi
# the packages taken from the machine's own python (see fa4_wheels.sh)
python3 -c 'import torch, typing_extensions, cuda.bindings.driver; print("fa4: torch", torch.__version__, "cuda", torch.version.cuda)' ||
  echo "fa4: WARNING: torch / typing_extensions / cuda-bindings missing from this python: FA4 will not import" >&2
PYTHONPATH=$PYPATH python3 -c 'from flash_attn.cute import flash_attn_func; import cutlass; print("fa4: imports (cutlass-dsl", getattr(cutlass, "__version__", "?") + ")")' ||
  echo "fa4: WARNING: flash_attn.cute does not import: see the error above" >&2
echo "fa4: installed; use PYTHONPATH=$PYPATH"
