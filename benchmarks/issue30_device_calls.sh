#!/usr/bin/env bash
# Issue 30's measurements on the H200, in device calls of at most 10 minutes each (the device tool's limit).
# Run from the repository root on the device machine; every result lands in $OUT (the device tool brings it back).
#
#   bash benchmarks/issue30_device_calls.sh kernels    # ~5 min: lesson 09's wgmma candidates (three runs, their
#                                                      #          medians)
#   bash benchmarks/issue30_device_calls.sh golden     # seconds: the wgmma golden forms (merged on 2026-12-05)
#   bash benchmarks/issue30_device_calls.sh grading    # ~6 min: one student's GPU lessons graded, checks side by side
#                                                      #          (compute-sanitizer's, then the emulator's bounds),
#                                                      #          phases
#   bash benchmarks/issue30_device_calls.sh banks A B  # ~2.5 min a lesson: GPU banks of lessons A, B... with the
#                                                      #          emulator's bounds (AUTOGRADER_GPU_BOUNDS=compute-
#                                                      #          sanitizer: with compute-sanitizer's)
#   bash benchmarks/issue30_device_calls.sh lesson11   # ~6 min: after a change of lesson 11's kernel: its GPU bank,
#                                                      #          native and as compute_75 PTX (the T4's stand-in),
#                                                      #          and the emulator beside the GPU on that bank
#   bash benchmarks/issue30_device_calls.sh decode     # ~4 min: the full decode_kernels.py run the lesson quotes; back
#                                                      #          here: benchmarks/decode_lesson_cell.py FILE prints
#                                                      #          the lesson's BENCH_DECODE_H200 cell, then make release
#
# What each result is for: benchmarks/results/tensor_cores_goals.txt, decode_kernels_h200.txt, gpu_grading_time.txt.
set -u
case "${1:-}" in kernels | golden | grading | banks | lesson11 | decode) ;; *) sed -n '2,21p' "$0"; exit 2 ;; esac
OUT=${OUT:?set OUT to the folder the results go to}
mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/pip.log" 2>&1 || tail -5 "$OUT/pip.log"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/device.txt"

case "${1:-}" in
kernels)
    # lesson 09: each wgmma form alone first (prints the wrong elements if the layout model is wrong), then all
    python3 benchmarks/tc_wgmma.py --selftest 2>&1 | tee "$OUT/tc_wgmma_selftest.txt"
    # three runs side by side: a goal met in one run only is not met (tensor_cores_goals.txt, 2026-12-05)
    python3 benchmarks/tc_wgmma.py --only wg2_bc128,wg2_bc64,wg2_bc64_x2,wg1 --runs 3 \
        --out "$OUT/tc_wgmma.json" 2>&1 | tail -60
    ;;
golden)
    # the emulator's wgmma model against the H200; back here:
    #   python benchmarks/emulator_golden.py --merge-from <files_at>/golden_wgmma
    python3 benchmarks/emulator_golden.py --only wgmma --out "$OUT/golden_wgmma" 2>&1 | tail -20
    ;;
grading)
    AUTOGRADER_GPU_BOUNDS=compute-sanitizer python3 benchmarks/gpu_grading_time.py --parallel-checks 4 \
        --out "$OUT/parallel4.json" 2>&1 | tail -15
    AUTOGRADER_GPU_BOUNDS=emulator python3 benchmarks/gpu_grading_time.py --parallel-checks 4 \
        --out "$OUT/parallel4_emulator.json" 2>&1 | tail -15
    python3 benchmarks/gpu_check_phases.py --out "$OUT/phases.json" 2>&1 | tail -30
    ;;
banks)
    shift
    for lesson in "$@"; do
        AUTOGRADER_GPU_BOUNDS=${AUTOGRADER_GPU_BOUNDS:-emulator} GPU_BANK_WORKERS=15 GPU_TEST_REPORT="$OUT/bank_report.json" timeout 280 \
            python3 -m pytest -q tests/test_gpu_lessons.py -k "bank and $lesson" -p no:cacheprovider >"$OUT/banks_$lesson.txt" 2>&1
        grep -E "^(E  |FAILED|[0-9]+ (passed|failed))" "$OUT/banks_$lesson.txt" | tail -30
    done
    ;;
lesson11)
    for arch in "" 75; do   # the bank's verdicts native (sm_90), then from compute_75 PTX
        AUTOGRADER_FORCE_PTX_ARCH=$arch GPU_BANK_WORKERS=15 timeout 200 \
            python3 -m pytest -q tests/test_gpu_lessons.py -k "bank and 11" -p no:cacheprovider >"$OUT/banks_11_${arch:-native}.txt" 2>&1
        grep -E "^(E  |FAILED|[0-9]+ (passed|failed))" "$OUT/banks_11_${arch:-native}.txt" | tail -30
    done
    timeout 150 python3 benchmarks/emulator_vs_h200.py --lessons 11 --workers 15 \
        --out benchmarks/results/emulator_vs_h200.json 2>&1 | tail -20
    cp benchmarks/results/emulator_vs_h200.json "$OUT/"
    ;;
decode)
    python3 benchmarks/decode_kernels.py --out "$OUT/decode_kernels_h200.json" 2>&1 | tail -40
    ;;
esac
