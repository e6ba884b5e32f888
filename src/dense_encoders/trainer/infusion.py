"""Cross-encoder-infused dual encoders (*Can Cross Encoders Produce Useful Sentence
Embeddings?*): building them from a cross-encoder and training them.

:func:`infuse` builds DE-(N+M)-CE (or DE-(N+M)-Rand): the cross-encoder's embeddings and first N
layers, M new layers. Two ways to train a DE-2-CE (or DE-2-Rand):

* ``mnrl`` (as in the paper): sentence-transformers' ``SentenceTransformerTrainer`` with
  ``MultipleNegativesRankingLoss`` on (query, positive, BM25 hard negative) triplets, negatives
  mined with ``bm25s`` (:mod:`dense_encoders.data.bm25`: top BM25 documents that are not judged relevant);
* ``distill``: our ``DistillationTrainer`` with the cross-encoder's own scores on the BM25
  candidates as teacher (``score_teacher``), losses configurable (default Margin-MSE + InfoNCE).

The retrieve + rerank report of the trained encoders is :mod:`dense_encoders.evaluation.infusion_report`.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from ..data.bm25 import bm25_run, mine_bm25_triplets
from ..data.retrieval import RetrievalDataset, load_dataset_for_evaluation
from ..checkpoints.loading import cross_encoder_model_and_tokenizer
from ..models.infused import InfusedDualEncoderModel

logger = logging.getLogger(__name__)

METHODS = ("mnrl", "distill")


def infuse(
    cross_encoder,
    *,
    num_copied_layers: int = 1,
    num_new_layers: int = 1,
    random_init: bool = False,
    pooling: str = "mean",
    tokenizer=None,
    seed: int | None = 0,
):
    """DE-(N+M)-CE (or -Rand) from a cross-encoder: ``(InfusedDualEncoderModel, tokenizer)``."""
    model, tokenizer = cross_encoder_model_and_tokenizer(cross_encoder, tokenizer)
    name = str(cross_encoder) if isinstance(cross_encoder, (str, Path)) else getattr(model, "name_or_path", None)
    if seed is not None:
        torch.manual_seed(seed)
    dual = InfusedDualEncoderModel.from_cross_encoder(
        model, num_copied_layers=num_copied_layers, num_new_layers=num_new_layers, random_init=random_init,
        pooling=pooling, infused_from=name or None,
    )
    return dual, tokenizer


def save_dual_encoder(model, tokenizer, folder: str | Path, similarity: str = "cosine") -> Path:
    """Weights, remote code, tokenizer and sentence-transformers files (pooling from the config)."""
    from ..checkpoints.folder import native_pooling, write_sentence_transformers_files

    folder = Path(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    write_sentence_transformers_files(folder, pooling=native_pooling(model.config), similarity=similarity)
    return folder


def train_mnrl(
    model_folder: str | Path,
    triplets: list[dict[str, str]],
    output_dir: str | Path,
    *,
    epochs: float = 1.0,
    batch_size: int = 32,
    learning_rate: float = 5e-5,
    warmup_steps: float = 0.1,
    max_length: int = 256,
    seed: int = 0,
) -> Path:
    """The paper's training: ``MultipleNegativesRankingLoss`` (in-batch + BM25 negatives), no duplicate
    texts in a batch, with ``SentenceTransformerTrainer`` (the recipe ``ce-infusion`` has the paper's values)."""
    import datasets
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.training_args import BatchSamplers

    model = SentenceTransformer(str(model_folder), trust_remote_code=True, device="cpu" if _no_gpu() else None)
    model.max_seq_length = max_length
    args = SentenceTransformerTrainingArguments(
        output_dir=str(output_dir), num_train_epochs=epochs, per_device_train_batch_size=batch_size,
        learning_rate=learning_rate, warmup_steps=warmup_steps, batch_sampler=BatchSamplers.NO_DUPLICATES,
        save_strategy="no", logging_steps=10, report_to="none", seed=seed,
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=datasets.Dataset.from_list(triplets),
        loss=MultipleNegativesRankingLoss(model),
    )
    trainer.train()
    model.save(str(output_dir))
    from .output_dir import write_training_args

    write_training_args(args, output_dir)  # JSON, never the Trainer's pickle
    return Path(output_dir)


def _no_gpu() -> bool:
    return not torch.cuda.is_available()


def train_infused(
    cross_encoder: str | Path,
    train_data: str | Path | RetrievalDataset,
    output_dir: str | Path,
    *,
    method: str = "mnrl",
    split: str = "train",
    random_init: bool = False,
    num_copied_layers: int = 1,
    num_new_layers: int = 1,
    epochs: float = 1.0,
    batch_size: int = 32,
    learning_rate: float = 5e-5,
    warmup_steps: float = 0.1,
    max_length: int = 256,
    losses: str = "margin_mse+infonce",
    candidates: int = 30,
    seed: int = 0,
    pair_threshold: float | None = None,
    pair_scale: float | None = None,
) -> Path:
    """Build DE-(N+M)-CE (or -Rand with ``random_init``) from ``cross_encoder`` and train it on the
    ``split`` of a BEIR folder (or on a pairs file, or a graded pairs file thresholded by ``pair_threshold`` /
    ``pair_scale``: :func:`~dense_encoders.data.retrieval.load_dataset_for_evaluation`) by ``method`` (module
    doc). Returns the saved folder.

    ``output_dir`` is not checked here: ``dense-encoders infuse`` checks (or clears) its ``--output-dir``
    once for all the models it trains into it (:func:`dense_encoders.trainer.output_dir.prepare_output_dir`)."""
    if method not in METHODS:
        raise ValueError(f"method={method!r}: choose one of {METHODS}")
    dataset = train_data if isinstance(train_data, RetrievalDataset) else load_dataset_for_evaluation(
        train_data, split=split, pair_threshold=pair_threshold, pair_scale=pair_scale)
    output_dir = Path(output_dir)
    initial = output_dir / "initial"
    model, tokenizer = infuse(cross_encoder, num_copied_layers=num_copied_layers, num_new_layers=num_new_layers,
                              random_init=random_init, seed=seed)
    save_dual_encoder(model, tokenizer, initial)
    run = bm25_run(dataset, candidates)
    if method == "mnrl":
        triplets = mine_bm25_triplets(dataset, negatives_from_top=candidates, seed=seed, run=run)
        logger.info("training on %d BM25 triplets", len(triplets))
        train_mnrl(initial, triplets, output_dir, epochs=epochs, batch_size=batch_size, learning_rate=learning_rate,
                   warmup_steps=warmup_steps, max_length=max_length, seed=seed)
    else:
        from .distillation import DistillationArguments, DistillationSetup, distill
        from .teacher import score_teacher

        train_file = output_dir / "teacher-scores.jsonl"
        score_teacher(cross_encoder, run, train_file, queries=dataset.queries, corpus=dataset.corpus,
                      top_k=candidates, include_texts=True, batch_size=batch_size)
        setup = DistillationSetup(student=str(initial), train_file=str(train_file), losses=losses,
                                  documents_per_query=8, query_max_length=64, document_max_length=max_length)
        args = DistillationArguments(output_dir=str(output_dir), num_train_epochs=epochs,
                                     per_device_train_batch_size=batch_size,
                                     learning_rate=learning_rate, warmup_steps=warmup_steps, seed=seed,
                                     use_cpu=_no_gpu())
        distill(setup, args, check_output_dir=False)  # the folder already holds initial/ and the teacher scores
    return output_dir


__all__ = [
    "METHODS",
    "infuse",
    "save_dual_encoder",
    "train_infused",
    "train_mnrl",
]
