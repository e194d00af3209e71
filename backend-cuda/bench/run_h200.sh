#!/usr/bin/env bash
# The GPU check in two halves (see ../../../shared/GPU-CHECKS.md, "compile here, run there").
#   backend-cuda/bench/run_h200.sh build [--quick] [--checks all|none|only] [--only PREFIX,...]
#                                    on the development machine: builds the sm_90a bundles
#                                    into bench/bundles (the small sizes into bench/bundles/quick,
#                                    the correctness checks of checks.py -- the whole conformance
#                                    catalogue, the examples, the dialect and benchmark kernels
#                                    -- into bench/bundles/checks) and checks them all with
#                                    harness.py --list
#   backend-cuda/bench/run_h200.sh run OUTDIR [--quick] [--only NAME,...] [--checks none|only]
#                                    on the GPU machine (torch + cuda-python, no TVM): the
#                                    checks under compute-sanitizer (table: OUTDIR/checks.md),
#                                    then correctness and timing of the benchmark, one table
# Run both from the repository root. Record results in backend-cuda/bench/RESULTS.md.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
case "${1:-}" in
  build)
    shift
    py="${PYTHON:-$root/.venv/bin/python}"
    "$py" "$here/build_bundles.py" --out "$here/bundles" "$@"
    PYTHONPATH="$root/core${PYTHONPATH:+:$PYTHONPATH}" "$py" "$here/harness.py" --bundles "$here/bundles" --list
    if [ -d "$here/bundles/quick" ]; then
      PYTHONPATH="$root/core${PYTHONPATH:+:$PYTHONPATH}" "$py" "$here/harness.py" --bundles "$here/bundles" --quick --list
    fi
    du -sh "$here/bundles"
    ;;
  run)
    out="${2:?usage: run_h200.sh run OUTDIR}"
    mkdir -p "$out"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.txt" || true
    PYTHONPATH="$root/core${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python}" "$here/harness.py" --bundles "$here/bundles" \
      --out "$out" "${@:3}"
    ;;
  *)
    echo "usage: $0 build [--quick] | run OUTDIR [--quick] [--only NAME,...]" >&2
    exit 2
    ;;
esac
