#!/usr/bin/env bash
# The GPU check in two halves (see ../../../shared/GPU-CHECKS.md, "compile here, run there").
#   backend-cuda/bench/run_h200.sh build [--quick]   on the development machine: builds the
#                                                     sm_90a bundles into bench/bundles (the
#                                                     small sizes into bench/bundles/quick) and
#                                                     checks them with harness.py --list
#   backend-cuda/bench/run_h200.sh run OUTDIR [--quick] [--only NAME,...]
#                                                     on the GPU machine (torch + cuda-python,
#                                                     no TVM): correctness, timing, one table
# Run both from the repository root. Record results in backend-cuda/bench/RESULTS.md.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
case "${1:-}" in
  build)
    shift
    py="${PYTHON:-$root/.venv/bin/python}"
    "$py" "$here/build_bundles.py" --out "$here/bundles" "$@"
    PYTHONPATH="$root/core" "$py" "$here/harness.py" --bundles "$here/bundles" --list
    if [ -d "$here/bundles/quick" ]; then
      PYTHONPATH="$root/core" "$py" "$here/harness.py" --bundles "$here/bundles" --quick --list
    fi
    du -sh "$here/bundles"
    ;;
  run)
    out="${2:?usage: run_h200.sh run OUTDIR}"
    mkdir -p "$out"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.txt" || true
    PYTHONPATH="$root/core" "${PYTHON:-python}" "$here/harness.py" --bundles "$here/bundles" \
      --out "$out" "${@:3}"
    ;;
  *)
    echo "usage: $0 build [--quick] | run OUTDIR [--quick] [--only NAME,...]" >&2
    exit 2
    ;;
esac
