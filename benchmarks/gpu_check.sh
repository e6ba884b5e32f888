#!/usr/bin/env bash
# The GPU checks of TITE's speed in one call (a lent GPU's time is short: one prepared script, full logs kept).
# Parts, in the default order (what was never measured first):
#   env          the card, torch, transformers, sentence-transformers, triton
#   tests        every CUDA-only test of the TITE model, its kernels and the encoding pipeline
#   e2e          dense-encoders bench --end-to-end: E2E_TEXTS passages (default 20,000) of TEXTS through
#                encode_corpus and SentenceTransformer.encode_document beside the bare forward, BERT-base and
#                tite-2-late / tite-2-staggered, in batches of E2E_BATCHES (default 1024)
#   distill      benchmarks/distillation_step.py --device cuda (tite-2-late vs BERT-base)
#   profile      benchmarks/tite_gpu_profile.py: host / device breakdown and torch.profiler's top-10 tables at 1024
#                passages (PROFILE_ARGS adds to or overrides its arguments)
#   bench-large  dense-encoders bench, 1024 passages / 4096 queries per batch, with CUDA graphs rows
#   bench-small  the same at 256 passages / 1024 queries
# Every part writes OUT/PART.log as it runs and prints its summary when it ends, so a run cut short still tells
# what it measured.
#
# Usage (repository root): bash benchmarks/gpu_check.sh LENGTHS TEXTS OUT [PART ...]
#   LENGTHS  a BEIR folder or the JSON of `dense-encoders bench --lengths-from BEIR_FOLDER --save-lengths FILE`
#   TEXTS    a BEIR folder (or .jsonl) of passages for the end-to-end part
#   OUT      folder of the logs (one per part)
#   PART     the parts to run (default: all, in the order above)
# Environment: CHECK_TESTS (extra pytest node ids for the tests part), E2E_BATCHES (default "1024"), E2E_TEXTS
# (default 20000), PART_LIMIT (seconds per part, default 240; e2e: E2E_LIMIT, default 300), PROFILE_ARGS.
# GPU_CHECK_DRY_RUN=1 runs every part on the CPU at tiny sizes (tiny presets, a few texts, one round): a check of
# the script and its commands before a GPU's minutes are spent on it; its figures mean nothing.
set -u
lengths=$1 texts=$2 out=$3
shift 3
parts=${*:-env tests e2e distill profile bench-large bench-small}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true
cli=(python -m dense_encoders.cli)
limit=${PART_LIMIT:-240}
mkdir -p "$out"

if [ "${GPU_CHECK_DRY_RUN:-0}" = 1 ]; then  # CPU, tiny: every command runs, quickly
    device=(--device cpu) graphs=() quick=(--quick)
    presets=(tite-2-late tite-2-staggered)  # bench --quick maps them to the tiny-* presets
    e2e_texts=${E2E_TEXTS:-64} e2e_batches=${E2E_BATCHES:-16}
    large=(--num-docs 32 --doc-batch 16 --num-queries 32 --query-batch 16) small=(--num-docs 16 --doc-batch 8
        --num-queries 16 --query-batch 8)
    profile=(--device cpu --preset tiny-tite-2-late --max-length 16 --batches 16 --num-batches 2 --repeats 1)
    distill=(--device cpu --presets tite-2-late --queries 1 --docs-per-query 2 --query-length 8 --doc-length 32
        --rounds 1 --steps 1)
else
    device=(--device cuda) graphs=(--cuda-graphs) quick=()
    presets=(tite-2-late tite-2-staggered)
    e2e_texts=${E2E_TEXTS:-20000} e2e_batches=${E2E_BATCHES:-1024}
    large=(--num-docs 8192 --doc-batch 1024 --num-queries 16384 --query-batch 4096)
    small=(--num-docs 4096 --doc-batch 256 --num-queries 8192 --query-batch 1024)
    profile=(--device cuda --batches 1024)
    distill=(--device cuda --queries 32 --docs-per-query 8 --rounds 2 --steps 4)
fi

run() {  # run NAME SECONDS COMMAND...: the command's output into OUT/NAME.log, its rc and time here
    local name=$1 seconds=$2 started=$SECONDS rc
    shift 2
    echo "=== $name (limit ${seconds}s)"
    timeout "$seconds" "$@" >>"$out/$name.log" 2>&1
    rc=$?
    echo "=== $name: rc $rc in $((SECONDS - started)) s"
}

for part in $parts; do
    case $part in
    env)
        run env 60 bash -c 'command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv; nproc;
            python -c "import torch, transformers, sentence_transformers, triton; print(torch.__version__,
            transformers.__version__, sentence_transformers.__version__, triton.__version__)"'
        cat "$out/env.log" ;;
    tests)
        # shellcheck disable=SC2086
        run tests "$limit" python -m pytest -q -rs -p no:cacheprovider -p no:faulthandler tests/test_tite_gpu.py \
            tests/test_tite_fused.py tests/test_tite_pooling.py \
            tests/test_batch_pipeline.py::test_on_a_gpu_the_vectors_are_sentence_transformers_and_no_batch_waits_for_the_device \
            tests/test_tite_plan.py::test_a_device_mask_is_read_as_its_host_copy ${CHECK_TESTS:-}
        tail -n 15 "$out/tests.log" ;;
    e2e)  # the bench's own tables kept small: the end-to-end table is what this part is for
        for batch in $e2e_batches; do
            run "e2e-$batch" "${E2E_LIMIT:-300}" "${cli[@]}" bench "${device[@]}" "${quick[@]}" --end-to-end \
                --texts "$texts" --num-texts "$e2e_texts" --presets "${presets[@]}" --doc-batch "$batch" \
                --num-docs "$batch" --num-queries "$batch" --query-batch "$batch" --rounds 1 --no-plot
            sed -n '/^## End to end/,$p' "$out/e2e-$batch.log"
        done ;;
    distill)
        run distill "$limit" python benchmarks/distillation_step.py "${distill[@]}"
        tail -n 12 "$out/distill.log" ;;
    profile)
        # shellcheck disable=SC2086
        run profile "$limit" python benchmarks/tite_gpu_profile.py --lengths "$lengths" "${profile[@]}" \
            --out "$out/profile.md" ${PROFILE_ARGS:-}
        grep -E '^(#|\|)' "$out/profile.md" 2>/dev/null || tail -n 5 "$out/profile.log" ;;
    bench-large)
        run bench-large "$limit" "${cli[@]}" bench "${device[@]}" "${quick[@]}" "${graphs[@]}" \
            --lengths-from "$lengths" --presets "${presets[@]}" "${large[@]}" --rounds 2 --no-plot
        grep -E '^\| (BERT|tite|tiny-tite)' "$out/bench-large.log" | cut -c1-150 ;;
    bench-small)
        run bench-small "$limit" "${cli[@]}" bench "${device[@]}" "${quick[@]}" "${graphs[@]}" \
            --lengths-from "$lengths" --presets "${presets[@]}" "${small[@]}" --rounds 2 --no-plot
        grep -E '^\| (BERT|tite|tiny-tite)' "$out/bench-small.log" | cut -c1-150 ;;
    *) echo "unknown part $part" ;;
    esac
done
