#!/usr/bin/env bash
# Downloads, on the dev machine, FlashAttention 4 (PyPI flash-attn-4, CuTe-DSL
# kernels that also run on Hopper) and the wheels it needs for the GPU
# machine's python3.12 + torch cu130 (which has no network), and packs them
# for the device tool's carry (64 MiB a call) into two git-ignored folders,
# each under 55 MiB:
#   .gpu-wheels-1/  the small wheels + the first part of the biggest wheel
#   .gpu-wheels-2/  the other part(s) of the biggest wheel
# The biggest (nvidia-cutlass-dsl-libs-cu13, ~88 MiB) is cut with split -b;
# wheels.sha256 (sha256sum of every whole wheel) and parts.txt (part, folder)
# go into both folders. scripts/gpu/fa4_install.sh puts it back together on
# the GPU machine (two calls: `stage`, then `install`; see its header).
#
#   bash scripts/gpu/fa4_wheels.sh          downloads to $FA4_DL (default
#                                            /tmp/fa4-wheels) and packs
#
# Versions: flash-attn-4 4.0.0b36 declares nvidia-cutlass-dsl>=4.6.2,
# apache-tvm-ffi>=0.1.11,<0.2, torch-c-dlpack-ext, quack-kernels>=0.5.3, einops
# (flash_attn/cute/testing.py imports it at import time), typing_extensions,
# torch and, for CUDA 13, nvidia-cutlass-dsl[cu13]. nvidia-cutlass-dsl 4.8.1
# pins its -libs-base (which pins -libs-core) and -libs-cu13 at ==4.8.1;
# quack-kernels 0.6.5 wants nvidia-cutlass-dsl>=4.7. Not shipped, taken from
# the GPU machine's torch 2.11 install: typing_extensions, cuda-bindings (torch
# 2.11 cu130 requires cuda-bindings>=13.0.3; cutlass-dsl imports
# cuda.bindings.driver) and protobuf (declared by cutlass-dsl, imported by no
# Python file of it). Override a version with e.g. FA4_VERSION=4.0.0b35.
set -euo pipefail
ROOT=$(pwd)
DL=${FA4_DL:-/tmp/fa4-wheels}
PY=3.12
LIMIT_MIB=54 # each folder's size at most (the device tool carries 64 MiB a call)
FA4_VERSION=${FA4_VERSION:-4.0.0b36}
CUTLASS_VERSION=${CUTLASS_VERSION:-4.8.1}
PKGS=(
  "flash-attn-4==$FA4_VERSION"
  "nvidia-cutlass-dsl==$CUTLASS_VERSION"
  "nvidia-cutlass-dsl-libs-base==$CUTLASS_VERSION"
  "nvidia-cutlass-dsl-libs-core==$CUTLASS_VERSION"
  "nvidia-cutlass-dsl-libs-cu13==$CUTLASS_VERSION"
  "quack-kernels==${QUACK_VERSION:-0.6.5}"
  "apache-tvm-ffi==${TVM_FFI_VERSION:-0.1.15.post2}"
  "torch-c-dlpack-ext==${DLPACK_EXT_VERSION:-0.1.5}"
  "einops==${EINOPS_VERSION:-0.8.2}"
)

if [ ! -d "$ROOT/.git" ] || [ ! -f "$ROOT/bench/gpu/anchors.py" ]; then
  echo "fa4_wheels.sh: run it in the repository root" >&2
  exit 1
fi
mkdir -p "$DL"
for p in "${PKGS[@]}"; do
  # binary wheels for cp312 manylinux; a pure-python (py3-none-any) wheel is
  # accepted under these flags too, but retry without a platform if pip says no
  if ! pip download -q --no-deps --only-binary=:all: --python-version "$PY" --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_24_x86_64 --pre -d "$DL" "$p"; then
    echo "retrying $p without a platform (pure python)"
    pip download -q --no-deps --only-binary=:all: --python-version "$PY" --pre -d "$DL" "$p"
  fi
done

# the wheel files of these pins (the download folder may hold older ones)
wheels=()
for p in "${PKGS[@]}"; do
  name=${p%%==*}
  ver=${p#*==}
  # a wheel's file name: distribution with - and . as _, then -version-
  w=$(find "$DL" -maxdepth 1 -name "${name//-/_}-$ver-*.whl" | sort | tail -1)
  [ -n "$w" ] || {
    echo "fa4_wheels.sh: no wheel for $p in $DL" >&2
    exit 1
  }
  wheels+=("$w")
done

# check the declared requirements of flash-attn-4 against these pins
python3 - "${wheels[@]}" <<'EOF'
import re, sys, zipfile

def meta(path):
    z = zipfile.ZipFile(path)
    n = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    return z.read(n).decode()

have = {}
for w in sys.argv[1:]:
    m = meta(w)
    name = re.search(r"^Name: (.*)$", m, re.M).group(1).strip().lower().replace("_", "-")
    have[name] = re.search(r"^Version: (.*)$", m, re.M).group(1).strip()
try:
    from packaging.requirements import Requirement
except ImportError:
    try:
        from pip._vendor.packaging.requirements import Requirement
    except ImportError:
        Requirement = None
        print("  (no packaging module: requirements not checked)")
bad = 0
missing = set()
for w in sys.argv[1:]:
    for line in re.findall(r"^Requires-Dist: (.*)$", meta(w), re.M):
        if Requirement is None:
            break
        r = Requirement(line)
        if r.marker is not None and not r.marker.evaluate({"extra": "cu13", "python_version": "3.12"}):
            continue
        n = r.name.lower().replace("_", "-")
        if n in have and not r.specifier.contains(have[n], prereleases=True):
            print(f"  {w.rsplit('/', 1)[-1]} wants {line}, have {have[n]}")
            bad += 1
        elif n not in have:
            missing.add(n)
missing.discard("nvidia-cutlass-dsl-libs-cu12")  # -libs-cu13 stands for it (the [cu13] extra)
print("not shipped (the GPU machine's own):", ", ".join(sorted(missing)))
if bad:
    sys.exit("fa4_wheels.sh: pins do not meet the declared requirements")
print("requirements met:", ", ".join(f"{k} {v}" for k, v in sorted(have.items())))
EOF

# pack: the biggest wheel is split; folder 1 gets the others and its first
# part, folder 2 the remaining part(s)
for x in /.gpu-wheels-1/ /.gpu-wheels-2/; do
  grep -qx "$x" .git/info/exclude 2>/dev/null || echo "$x" >>.git/info/exclude
done
W1=$ROOT/.gpu-wheels-1
W2=$ROOT/.gpu-wheels-2
rm -rf "$W1" "$W2"
mkdir -p "$W1" "$W2"
big=$(for w in "${wheels[@]}"; do echo "$(stat -c %s "$w") $w"; done | sort -n | tail -1 | cut -d' ' -f2-)
bigname=$(basename "$big")
small=0
for w in "${wheels[@]}"; do
  [ "$w" = "$big" ] && continue
  cp "$w" "$W1/"
  small=$((small + $(stat -c %s "$w")))
done
limit=$((LIMIT_MIB * 1024 * 1024))
part=$((limit - small - 64 * 1024)) # room for the manifest
[ "$part" -gt 0 ] || {
  echo "fa4_wheels.sh: the small wheels alone exceed $LIMIT_MIB MiB" >&2
  exit 1
}
split -b "$part" -d -a 2 "$big" "$W2/$bigname.part-"
first=$(find "$W2" -name "$bigname.part-*" | sort | head -1)
mv "$first" "$W1/"
names=()
for w in "${wheels[@]}"; do names+=("$(basename "$w")"); done
(cd "$DL" && sha256sum -- "${names[@]}") >"$W1/wheels.sha256"
{
  find "$W1" -name "$bigname.part-*" -printf '%f .gpu-wheels-1\n'
  find "$W2" -name "$bigname.part-*" -printf '%f .gpu-wheels-2\n'
} | sort >"$W1/parts.txt"
cp "$W1/wheels.sha256" "$W1/parts.txt" "$W2/"
for d in "$W1" "$W2"; do
  b=$(du -sb "$d" | cut -f1)
  echo "$(basename "$d"): $b bytes ($(awk -v b="$b" 'BEGIN { printf "%.1f", b / 1048576 }') MiB), $(find "$d" -type f | wc -l) files"
  [ "$b" -lt $((55 * 1024 * 1024)) ] || {
    echo "fa4_wheels.sh: $d is over 55 MiB" >&2
    exit 1
  }
done
