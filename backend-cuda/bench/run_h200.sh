#!/usr/bin/env bash
# The GPU check in two halves (see ../../../shared/GPU-CHECKS.md, "compile here, run there").
#   backend-cuda/bench/run_h200.sh build [--quick] [--checks all|none|only] [--only PREFIX,...]
#                                    on the development machine: builds the sm_90a bundles
#                                    into bench/bundles (the small sizes into bench/bundles/quick,
#                                    the correctness checks of checks.py -- the whole conformance
#                                    catalogue, the examples, the dialect and benchmark kernels
#                                    -- into bench/bundles/checks) and checks them all with
#                                    harness.py --list
#   backend-cuda/bench/run_h200.sh pack [--quick | --plan PLAN]
#                                    on the development machine: bench/bundles as one xz
#                                    archive, .devpack/bundles.tar.xz (git-ignored: carry
#                                    ".devpack"; the quick sizes only with --quick); with
#                                    --plan only the bundles PLAN names (the whole catalogue's
#                                    checks, ~77 MB packed, exceed the 64 MiB a device run
#                                    carries: pack refuses an archive over 56 MiB)
#   backend-cuda/bench/run_h200.sh run OUTDIR [--quick] [--only NAME,...] [--checks none|only]
#                                    on the GPU machine (torch + cuda-python, no TVM; unpacks
#                                    .devpack/bundles.tar.xz first when bench/bundles is not
#                                    there): the checks plainly, then under compute-sanitizer
#                                    (table: OUTDIR/checks.md), then correctness and timing of
#                                    the benchmark, one table
#   backend-cuda/bench/run_h200.sh ncu OUTDIR ROW [ROW ...]
#                                    on the GPU machine: Nsight Compute on one launch of each
#                                    row's kernel (speed of light, occupancy, warp states, stall
#                                    samples): OUTDIR/ROW.ncu-rep, ROW.txt (the details page),
#                                    ROW.sass.csv (stall samples per SASS instruction)
#   backend-cuda/bench/run_h200.sh plan OUTDIR [PLAN]
#                                    on the GPU machine: one whole device session as PLAN (a
#                                    bash file of settings; default bench/next-run.plan, which
#                                    says what the next run should measure): the benchmark
#                                    rows, then the checks under the sanitizers, then ncu of
#                                    our rows and the peer's, each step under its own time
#                                    limit so an overrun costs only that step; after each
#                                    step OUTDIR gets plan.log (each step's seconds and exit
#                                    status), results.tar.xz (every file of the steps but the
#                                    ncu reports), targets.md (the issues' numbers) and each
#                                    ncu step's reports (STEP-reports.tar): within the 8 files
#                                    a device run returns
# Run them from the repository root. Record results in backend-cuda/bench/RESULTS.md.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
pythonpath="$root/core${PYTHONPATH:+:$PYTHONPATH}"  # the harness runs the source tree
unpack() {  # the bundles pack made, on a machine that has only the archive
  if [ ! -d "$here/bundles" ] && [ -f "$root/.devpack/bundles.tar.xz" ]; then
    tar -C "$here" -xJf "$root/.devpack/bundles.tar.xz"
  fi
}
case "${1:-}" in
  build)
    shift
    py="${PYTHON:-$root/.venv/bin/python}"
    "$py" "$here/build_bundles.py" --out "$here/bundles" "$@"
    PYTHONPATH="$pythonpath" "$py" "$here/harness.py" --bundles "$here/bundles" --list
    if [ -d "$here/bundles/quick" ]; then
      PYTHONPATH="$pythonpath" "$py" "$here/harness.py" --bundles "$here/bundles" --quick --list
    fi
    du -sh "$here/bundles"
    ;;
  pack)
    mkdir -p "$root/.devpack"
    exclude="$(git -C "$root" rev-parse --path-format=absolute --git-path info/exclude \
               2>/dev/null || echo "$root/.git/info/exclude")"  # a worktree's .git is a file
    mkdir -p "$(dirname "$exclude")"
    grep -qx '/.devpack/' "$exclude" 2>/dev/null || echo '/.devpack/' >> "$exclude"
    skip=(--exclude=bundles/quick) names=(bundles)
    case "${2:-}" in
      --quick) skip=() ;;
      --plan)  # only the bundles PLAN names: its rows and profiles, its checks and sweep
        plan="${3:?usage: run_h200.sh pack --plan PLAN}"
        ROWS="" CHECKS="" SWEEP="" NCU_ROWS="" NCU_PEER_ROWS=""
        # shellcheck source=/dev/null
        source "$plan"
        names=()
        for row in ${ROWS//,/ } ${NCU_ROWS//,/ } ${NCU_PEER_ROWS//,/ }; do
          names+=("bundles/$row")
        done
        if [ "$CHECKS" = all ] || [ "$SWEEP" = all ]; then
          names+=(bundles/checks)
        elif [ -n "$CHECKS$SWEEP" ]; then
          names+=(bundles/checks/index.json)
          set -f  # a check may be a pattern (conformance-*): it picks the built ones
          for check in ${CHECKS//,/ } ${SWEEP//,/ }; do
            case "$check" in
              *[*?[]*) set +f
                       mapfile -t -O "${#names[@]}" names < <(cd "$here" && compgen -G \
                         "bundles/checks/$check" || echo "bundles/checks/$check")
                       set -f ;;
              *) names+=("bundles/checks/$check") ;;
            esac
          done
          set +f
        fi
        mapfile -t names < <(printf '%s\n' "${names[@]}" | sort -u)
        for name in "${names[@]}"; do
          [ -e "$here/$name" ] || { echo "pack: $plan names $name, which is not built" \
            "(run_h200.sh build first)" >&2; exit 1; }
        done
        ;;
    esac
    tar -C "$here" -cf - "${skip[@]}" "${names[@]}" | xz -T0 -4 > "$root/.devpack/bundles.tar.xz"
    du -h "$root/.devpack/bundles.tar.xz"
    # a device run carries 64 MiB with the working tree: an archive over the limit never
    # arrives (the whole catalogue's checks, ~77 MB since their sizes were fixed, are over it)
    limit=$(( ${PACK_LIMIT_MB:-56} * 1024 * 1024 ))
    if [ "$(stat -c %s "$root/.devpack/bundles.tar.xz")" -gt "$limit" ]; then
      echo "pack: .devpack/bundles.tar.xz is over the ${PACK_LIMIT_MB:-56} MiB a device run" \
        "can carry beside the working tree; pack --plan PLAN (only its bundles)" >&2
      exit 1
    fi
    ;;
  run)
    out="${2:?usage: run_h200.sh run OUTDIR}"
    unpack
    mkdir -p "$out"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.txt" || true
    PYTHONPATH="$pythonpath" "${PYTHON:-python3}" "$here/harness.py" --bundles "$here/bundles" \
      --out "$out" "${@:3}"
    ;;
  ncu)
    out="${2:?usage: run_h200.sh ncu OUTDIR ROW [ROW ...]}"
    [ $# -ge 3 ] || { echo "usage: $0 ncu OUTDIR ROW [ROW ...]" >&2; exit 2; }
    unpack
    mkdir -p "$out"
    # one launch of each row's kernel (the bundle's first entry: main_kernel, or main_0_kernel
    # of a kernel sequence) after two warm-up launches, unmodified clocks (as the harness
    # times it); NCU_FILTER picks other kernels (e.g. the peer's: "-k regex:nvjet|sm90")
    for row in "${@:3}"; do
      entry="$(grep -o '"entry": "[A-Za-z0-9_]*' "$here/bundles/$row/manifest.json" \
               2>/dev/null | head -1 | cut -d'"' -f4 || true)"
      read -r -a filter <<< \
        "${NCU_FILTER:--k ${entry:-main_kernel} --launch-skip 2 --launch-count 1}"
      PYTHONPATH="$pythonpath" ncu --clock-control none "${filter[@]}" --section SpeedOfLight \
        --section WarpStateStats --section SourceCounters --section Occupancy \
        -o "$out/$row" -f "${PYTHON:-python3}" "$here/harness.py" --bundles "$here/bundles" \
        --child "$row" --budget 0.05 > "$out/$row.txt" 2>&1 || true
      if [ -f "$out/$row.ncu-rep" ]; then
        ncu --import "$out/$row.ncu-rep" --page details >> "$out/$row.txt" 2>&1 || true
        # stall samples per SASS instruction: where the warps wait
        ncu --import "$out/$row.ncu-rep" --page source --csv --print-source sass \
          > "$out/$row.sass.csv" 2>> "$out/$row.txt" || true
      fi
    done
    ;;
  plan)
    out="${2:?usage: run_h200.sh plan OUTDIR [PLAN]}"
    plan="${3:-$here/next-run.plan}"
    # the settings a plan may give (the empty ones skip their step)
    ROWS="" BENCH_S=250 ROW_TIMEOUT=40
    CHECKS="" CHECK_TOOLS=memcheck,racecheck,synccheck CHECKS_S=120 CHECKS_BUDGET=60
    NCU_ROWS="" NCU_PEER_ROWS="" NCU_PEER_FILTER="-k regex:nvjet|sm90|cudnn --launch-skip 2 --launch-count 1" NCU_S=150
    SWEEP="" SWEEP_TOOLS=memcheck,racecheck SWEEP_S=90 SWEEP_BUDGET=60
    # shellcheck source=/dev/null
    source "$plan"
    # the steps write under a work folder; OUTDIR gets what a device run returns (at most 8
    # files of 16 MiB): plan.log, results.tar.xz (every step's files but the Nsight Compute
    # reports), targets.md (targets.py on the benchmark rows), remade after every step so that
    # a run stopped from outside keeps the steps it finished, and each ncu step's reports
    # (ncu-reports.tar, ncu-peer-reports.tar; already compressed: a plain tar, made once)
    work="$(mktemp -d "${TMPDIR:-/tmp}/tw-plan.XXXXXX")"
    mkdir -p "$out"
    cp "$plan" "$work/plan.txt"
    : > "$work/plan.log"
    keep() {  # keep STEP: after STEP
      tar -C "$work" --exclude='*.ncu-rep' -cf - . | xz -T0 -3 > "$work.results" && \
        mv "$work.results" "$out/results.tar.xz"
      if compgen -G "$work/$1/*.ncu-rep" > /dev/null; then
        (cd "$work" && tar -cf "$work.reports" "$1"/*.ncu-rep) && \
          mv "$work.reports" "$out/$1-reports.tar"
      fi
      cp "$work/plan.log" "$out/plan.log"
      if [ -f "$work/bench/results.json" ]; then
        "${PYTHON:-python3}" "$here/targets.py" "$work/bench/results.json" > "$out/targets.md" \
          2>&1 || true
      fi
    }
    step() {  # step NAME SECONDS COMMAND...: one step under its limit, its time in plan.log
      local name=$1 limit=$2 t0 rc=0
      shift 2
      t0=$(date +%s)
      timeout "$limit" bash "$@" > "$work/$name.out" 2>&1 || rc=$?
      echo "$name: ${limit}s limit, $(( $(date +%s) - t0 ))s, exit $rc" | tee -a "$work/plan.log"
      keep "$name"
    }
    [ -z "$ROWS" ] || step bench "$BENCH_S" "$0" run "$work/bench" --checks none \
      --timeout "$ROW_TIMEOUT" --only "$ROWS"
    if [ -n "$CHECKS" ]; then
      only=()
      [ "$CHECKS" = all ] || only=(--only "$CHECKS")
      step checks "$CHECKS_S" "$0" run "$work/checks" --checks only "${only[@]}" --batch 64 \
        --tools "$CHECK_TOOLS" --checks-budget "$CHECKS_BUDGET" --batch-timeout 60 \
        --checks-stop $((CHECKS_S - 10))
    fi
    # shellcheck disable=SC2086  # the row lists split on commas into arguments
    [ -z "$NCU_ROWS" ] || step ncu "$NCU_S" "$0" ncu "$work/ncu" ${NCU_ROWS//,/ }
    # shellcheck disable=SC2086
    [ -z "$NCU_PEER_ROWS" ] || NCU_FILTER="$NCU_PEER_FILTER" step ncu-peer "$NCU_S" "$0" ncu \
      "$work/ncu-peer" ${NCU_PEER_ROWS//,/ }
    # last, a second checks step: e.g. the whole catalogue (SWEEP=all) after the new kernels'
    # checks had every tool first (a sanitizer walks the checks in the order named, within
    # its budget)
    if [ -n "$SWEEP" ]; then
      only=()
      [ "$SWEEP" = all ] || only=(--only "$SWEEP")
      step sweep "$SWEEP_S" "$0" run "$work/sweep" --checks only "${only[@]}" --batch 64 \
        --tools "$SWEEP_TOOLS" --checks-budget "$SWEEP_BUDGET" --batch-timeout 60 \
        --checks-stop $((SWEEP_S - 10))
    fi
    cat "$out/plan.log"
    [ ! -f "$out/targets.md" ] || cat "$out/targets.md"
    ;;
  *)
    echo "usage: $0 build [--quick] | pack [--quick] | run OUTDIR [--quick] [--only NAME,...]" \
         "| ncu OUTDIR ROW [ROW ...] | plan OUTDIR [PLAN]" >&2
    exit 2
    ;;
esac
