#!/usr/bin/env bash
# The GPU checks of TITE's speed in one call (a lent GPU's time is short: one prepared script, full logs kept):
#   env          the card, torch, transformers, triton
#   tests        every CUDA-only test of the suite (skipped on machines without CUDA)
#   profile      benchmarks/tite_gpu_profile.py: torch.profiler tables and the host / device breakdown, 256 and 1024
#   bench-large  dense-encoders bench, 1024 passages / 4096 queries per batch, with CUDA graphs rows
#   bench-small  the same at 256 passages / 1024 queries
#   distill      benchmarks/distillation_step.py --device cuda
#   e2e          dense-encoders bench --end-to-end: 100,000 passages through encode_corpus and SentenceTransformer.encode
#
# Usage (repository root): bash benchmarks/gpu_check.sh LENGTHS TEXTS OUT [PART ...]
#   LENGTHS  a BEIR folder or the JSON of `dense-encoders bench --lengths-from BEIR_FOLDER --save-lengths FILE`
#   TEXTS    a BEIR folder (or .jsonl) of passages for the end-to-end part
#   OUT      folder of the logs (one per part)
#   PART     the parts to run (default: all, in the order above)
# Environment: CHECK_TESTS (extra pytest node ids for the tests part), E2E_BATCHES (default "1024"), E2E_TEXTS
# (default 100000), E2E_LIMIT (seconds, default 300), PROFILE_ARGS (extra arguments of tite_gpu_profile.py).
set -u
lengths=$1 texts=$2 out=$3
shift 3
parts=${*:-env tests profile bench-large bench-small distill e2e}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true
cli=(python -m dense_encoders.cli)
mkdir -p "$out"

run() {  # run NAME SECONDS COMMAND...: the command's output into OUT/NAME.log, its last lines and rc here
    local name=$1 limit=$2 started=$SECONDS rc
    shift 2
    echo "=== $name (limit ${limit}s)"
    timeout "$limit" "$@" >>"$out/$name.log" 2>&1
    rc=$?
    echo "=== $name: rc $rc in $((SECONDS - started)) s"
}

for part in $parts; do
    case $part in
    env)
        run env 60 bash -c 'nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv; nproc;
            python -c "import torch, transformers, sentence_transformers, triton; print(torch.__version__,
            transformers.__version__, sentence_transformers.__version__, triton.__version__)"'
        cat "$out/env.log" ;;
    tests)
        # shellcheck disable=SC2086
        run tests 240 python -m pytest -q -rs -p no:cacheprovider tests/test_tite_gpu.py \
            tests/test_tite_pooling.py tests/test_batch_pipeline.py ${CHECK_TESTS:-}
        tail -n 15 "$out/tests.log" ;;
    profile)
        # shellcheck disable=SC2086
        run profile 240 python benchmarks/tite_gpu_profile.py --lengths "$lengths" --out "$out/profile.md" \
            ${PROFILE_ARGS:-}
        grep -E '^(#|\|)' "$out/profile.md" ;;
    bench-large)
        run bench-large 240 "${cli[@]}" bench --device cuda --cuda-graphs --lengths-from "$lengths" \
            --presets tite-2-late tite-2-staggered --num-docs 8192 --doc-batch 1024 --num-queries 16384 \
            --query-batch 4096 --rounds 2 --no-plot
        grep -E '^\| (BERT|tite)' "$out/bench-large.log" | cut -c1-150 ;;
    bench-small)
        run bench-small 240 "${cli[@]}" bench --device cuda --cuda-graphs --lengths-from "$lengths" \
            --presets tite-2-late tite-2-staggered --num-docs 4096 --doc-batch 256 --num-queries 8192 \
            --query-batch 1024 --rounds 2 --no-plot
        grep -E '^\| (BERT|tite)' "$out/bench-small.log" | cut -c1-150 ;;
    distill)
        run distill 240 python benchmarks/distillation_step.py --device cuda --queries 32 --docs-per-query 8 \
            --rounds 2 --steps 4
        tail -n 8 "$out/distill.log" ;;
    e2e)
        for batch in ${E2E_BATCHES:-1024}; do
            run "e2e-$batch" "${E2E_LIMIT:-300}" "${cli[@]}" bench --device cuda --end-to-end --texts "$texts" --num-texts "${E2E_TEXTS:-100000}" \
                --presets tite-2-late tite-2-staggered --doc-batch "$batch" --num-docs "$((2 * batch))" \
                --num-queries 2048 --query-batch 1024 --rounds 1 --no-plot
            sed -n '/^## End to end/,$p' "$out/e2e-$batch.log"
        done ;;
    *) echo "unknown part $part" ;;
    esac
done
