#!/usr/bin/env bash
# The CUDA paths proven, the kernels timed, the cost plan measured: one run on a GPU machine.
#
#   OUT=results/gpu_check benchmarks/gpu_check.sh        # about 9 minutes on an H100
#
# 0. probe: which compiled FlexAttention calls of FNA run correctly (flex_cuda_probe.py);
# 1. the CUDA tests: tests/test_cuda.py (every kernel, block and variant on the GPU), every
#    test that skips on a CPU for want of CUDA; pass/fail per test in cuda-tests.xml;
# 2. the kernels against SDPA in bf16, one process, interleaved: kernels.md (bench_gpu.py);
# 3. the cost plan's sampled jobs measured: plan-raw.json, for
#    `python3 -m pdelab.plan.calibration calibrate plan-raw.json` (on any machine);
# 4. throughput: compile_check and the compiled step against eager (bench_compile.py), k jobs
#    per GPU against one (bench_jobs_per_gpu.py), stacked seeds (bench_stacked_seeds.py),
#    FNA's norm modes (bench_fna.py);
# 5. the paper profile's models rehearsed on the GPU in bf16 until the time is up.
# Each step has its own time limit and the next runs whatever the last one gave; the logs
# and results land in $OUT (seven files: steps.log holds what each step printed).
# GPU_CHECK_S (default 560) bounds the whole run; GPU_CHECK_ONLY="probe tests" runs those
# steps alone (probe tests plan kernels compile jobs stacked norms rehearsal),
# GPU_CHECK_K="expr" selects tests (-k).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/gpu_check}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/pdelab-inductor}
start=$(date +%s)
left() { echo $(( ${GPU_CHECK_S:-560} - ($(date +%s) - start) )); }
step() { echo "== $1 ($(( $(date +%s) - start )) s)" | tee -a "$OUT/steps.log"; }

log() { tee -a "$OUT/steps.log"; }
want() { [ -z "${GPU_CHECK_ONLY:-}" ] || [[ " $GPU_CHECK_ONLY " == *" $1 "* ]]; }

step "machine"
{ nvidia-smi --query-gpu=name,uuid,memory.total,driver_version --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)"
} 2>&1 | log

if want probe; then
step "FlexAttention probe"
timeout 100 python3 benchmarks/flex_cuda_probe.py 2>&1 | log
fi

if want tests; then
step "CUDA tests"
workers=$(python3 -c "import xdist" 2>/dev/null && echo "-n 12" || echo "")
FNA=src/pdelab/papers/fractional_attention/tests
# -m "not faults": the tests named below include slow ones, which pyproject's addopts leaves out
# shellcheck disable=SC2086
timeout 140 python3 -m pytest -q -p no:cacheprovider -m "not faults" $workers -rfE \
  ${GPU_CHECK_K:+-k "$GPU_CHECK_K"} \
  --junitxml="$OUT/cuda-tests.xml" \
  tests/test_cuda.py \
  tests/test_gpu_usage.py \
  tests/test_gpu_slots.py::test_the_warm_server_leaves_cuda_uninitialised \
  "$FNA/test_fna.py::test_flex_on_cuda_equals_the_reference_with_gradients" \
  "$FNA/test_fna_flex.py::test_causal_flex_on_cuda_equals_the_reference_with_gradients" \
  "$FNA/test_fna_flex.py::test_an_epoch_on_cuda_compiles_once_per_bucket_and_grad_mode" \
  > "$OUT/cuda-tests.log" 2>&1
echo "pytest exit $?" >> "$OUT/cuda-tests.log"
tail -n 25 "$OUT/cuda-tests.log" | log
fi

if want plan; then
step "cost plan: sampled jobs measured"
timeout 120 python3 -m pdelab.plan.calibration measure --profile paper --out "$OUT/plan-raw.json" 2>&1 | log
echo "exit ${PIPESTATUS[0]}" | log
fi

if want kernels; then
step "kernels against SDPA"
timeout 110 python3 benchmarks/bench_gpu.py --out "$OUT/kernels" 2>&1 | grep -v "^|" | log
echo "exit ${PIPESTATUS[0]}" | log
cat "$OUT/kernels.md" 2>/dev/null
fi

if want compile; then
step "throughput: the compiled step against eager, one model per class"
timeout 150 python3 -m pdelab.plan.compile_check --profile paper > "$OUT/compile-check.log" 2>&1
echo "compile_check exit $?" | log
timeout 150 python3 benchmarks/bench_compile.py --device cuda --precision bf16 --dim 256 \
  --tokens 1024 --batch 32 --modes off default reduce-overhead --out "$OUT/compile.json" 2>&1 | log
fi

if want jobs; then
step "throughput: jobs per GPU (1, 2, 4 copies of a small paper job)"
timeout 90 python3 benchmarks/bench_jobs_per_gpu.py --device cuda --copies 1 2 4 \
  --out "$OUT/jobs-per-gpu.json" 2>&1 | log
fi

if want stacked; then
step "throughput: stacked seeds against sequential runs"
timeout 60 python3 benchmarks/bench_stacked_seeds.py --device cuda 2>&1 | log
fi

if want norms; then
step "throughput: FNA's norm modes"
timeout 60 python3 benchmarks/bench_fna.py --device cuda 2>&1 | tail -n 30 | log
fi

if want rehearsal && [ "$(left)" -gt 20 ]; then
  step "rehearsal on the GPU"
  timeout "$(( $(left) - 5 ))" python3 -m pdelab.plan.rehearsal --profile paper --device cuda \
    --precision bf16 --jobs 8 > "$OUT/rehearsal.log" 2>&1
  echo "exit $? (124: stopped at the time limit)" >> "$OUT/rehearsal.log"
  { grep -c "^ok " "$OUT/rehearsal.log" | sed 's/^/models passed: /'
    grep -v "^ok " "$OUT/rehearsal.log" | tail -n 15; } | log
fi
step "done"
