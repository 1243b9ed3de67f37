#!/usr/bin/env bash
# The Python half of `scripts/dev.sh test`: builds the package the way a user
# installs it (`pip install .` into a virtual environment) and runs the pytest
# suite (tests/python) against that installed package, not the source tree.
#   scripts/python_test.sh [BUILD_DIR] [pytest options]
# BUILD_DIR (what dev.sh passes: its ctest build) is not used: pip builds the
# C library itself, in build/python (kept, so a second run is incremental).
# The venv is build/venv, made with --system-site-packages so that a torch
# installed for this Python (or in the venv python3 runs from) is visible;
# the torch tests show as skipped where torch is not importable. pytest, numpy and ml_dtypes are installed
# into it. Environment: PYTHON (default python3); FLASHATTN_WITH_CUDA (0
# leaves the cuda backend out; default: 0 when no GPU is usable here, else
# the package's default, compiled when nvcc is found); FLASHATTN_CUDA_ARCHS.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then shift; fi # dev.sh's build dir

py=${PYTHON:-python3}
venv=$here/build/venv
vpy=$venv/bin/python
log=$here/build/python-install.log

# What a fresh Debian 12 lacks for this: the venv module (python3-venv holds
# ensurepip), a compiler and CMake for the C library. Installed with apt-get
# when root or with sudo, as scripts/dev.sh does; otherwise named.
need_install() {
  local missing=()
  if ! command -v "$py" >/dev/null; then
    missing+=(python3 python3-venv)
  elif ! [ -x "$vpy" ] && ! "$py" -c 'import ensurepip, venv' 2>/dev/null; then
    missing+=(python3-venv) # Debian keeps ensurepip (what venv needs for pip) there
  fi
  command -v cc >/dev/null || missing+=(gcc)
  command -v cmake >/dev/null || missing+=(cmake)
  command -v make >/dev/null || command -v ninja >/dev/null || missing+=(make)
  [ ${#missing[@]} -eq 0 ] && return 0
  if ! command -v apt-get >/dev/null; then
    echo "flashattn: please install: ${missing[*]} (Python >= 3.9 with its venv module, a C compiler, CMake >= 3.25)" >&2
    exit 1
  fi
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null; then sudo=sudo; else
      echo "flashattn: not root and no sudo; please install: ${missing[*]}" >&2
      exit 1
    fi
  fi
  echo "flashattn: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

gpu_usable() {
  command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}

need_install
"$py" -c 'import sys; sys.exit(sys.version_info < (3, 9))' || {
  echo "flashattn: $("$py" --version 2>&1) is too old; the package needs Python >= 3.9 (PYTHON=... picks another)" >&2
  exit 1
}

# A venv whose pip works (a run cut short, or one without ensurepip, leaves one without).
if ! { [ -x "$vpy" ] && "$vpy" -m pip --version >/dev/null 2>&1; }; then
  rm -rf "$venv"
  "$py" -m venv --system-site-packages "$venv"
fi
# When python3 is itself a venv (PATH from `source .../activate`), its packages
# (torch) are not the system site of a venv made from it: add them below ours.
pth=$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_flashattn_outer_env.pth
"$py" -c 'import site, sys
if sys.prefix != sys.base_prefix:
    for p in site.getsitepackages():
        print(f"import site; site.addsitedir({p!r})")' >"$pth"
[ -s "$pth" ] || rm -f "$pth"
pip=("$vpy" -m pip --disable-pip-version-check)

# Test dependencies, and the build backend: the package is built without
# pip's build isolation so that build/python stays valid from one run to the
# next (an isolated build env is a new temporary directory each time) and a
# second run needs no network.
deps=(pytest numpy ml_dtypes "scikit-build-core>=0.10")
cmake_ok() { # CMake >= 3.25 on PATH (pyproject's minimum); else pip's cmake
  local major minor
  read -r major minor < <(cmake --version 2>/dev/null | sed -n '1s/^cmake version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p') || true
  [ -n "${minor:-}" ] && { [ "$major" -gt 3 ] || { [ "$major" -eq 3 ] && [ "$minor" -ge 25 ]; }; }
}
cmake_ok || deps+=("cmake>=3.25")
command -v make >/dev/null || command -v ninja >/dev/null || deps+=(ninja)
"${pip[@]}" install -q "${deps[@]}"

if [ -z "${FLASHATTN_WITH_CUDA:-}" ] && ! gpu_usable; then
  export FLASHATTN_WITH_CUDA=0
  echo "flashattn: no usable GPU here (nvidia-smi -L lists none): the Python package is built without the cuda" \
    "backend (FLASHATTN_WITH_CUDA=0); the ctest build compiles and checks it"
fi

echo "flashattn: pip install . into build/venv (C library built in build/python; the first build takes a few minutes)"
if ! "${pip[@]}" install --no-build-isolation --no-deps --force-reinstall \
  --config-settings=build-dir=build/python . >"$log" 2>&1; then
  tail -n 60 "$log" >&2
  echo "flashattn: pip install . failed (whole log: $log)" >&2
  exit 1
fi

# Run from a directory where the source tree's python/ is not importable, with
# nothing pointing elsewhere, so `import flashattn` is the installed package.
run=$here/build/python-test
mkdir -p "$run"
cd "$run"
unset PYTHONPATH FLASHATTN_LIBRARY
where=$("$vpy" -c 'import flashattn; print(flashattn.__file__); print(flashattn.library_path())')
echo "flashattn: testing $(echo "$where" | head -n 1) (library $(echo "$where" | tail -n 1))"
case "$where" in
  "$venv"/*) ;;
  *)
    echo "flashattn: import flashattn did not find the package installed in $venv" >&2
    exit 1
    ;;
esac

out=$here/build/python-test.log
xml=$here/build/python-test.xml # how many ran, whatever -q options the caller adds (-qq drops the summary line)
rm -f "$xml"
set +e
"$vpy" -m pytest "$here/tests/python" -q -rs -p no:cacheprovider --junitxml="$xml" "$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" = 5 ]; then
  echo "flashattn: pytest collected no tests" >&2
  exit 1
fi
[ "$rc" = 0 ] || exit "$rc"
ran=$("$vpy" -c 'import sys, xml.etree.ElementTree as E
r = E.parse(sys.argv[1]).getroot()
s = r if r.tag == "testsuite" else r.find("testsuite")
print(int(s.get("tests")) - int(s.get("skipped")) - int(s.get("errors")) - int(s.get("failures")))' "$xml")
if [ "$ran" -le 0 ]; then
  echo "flashattn: no Python test ran (every one skipped)" >&2
  exit 1
fi
