# Sourced by the scripts that run on the GPU machine (in the repository
# root): strict mode, $OUT (default /tmp/fa-out) made, ROOT the repository
# root, $SUMMARY ($OUT/summary.txt) emptied, and say, which prints a line
# and appends it to $SUMMARY.
# shellcheck shell=bash
set -u -o pipefail
OUT=${OUT:-/tmp/fa-out}
mkdir -p "$OUT"
ROOT=$(pwd)
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
