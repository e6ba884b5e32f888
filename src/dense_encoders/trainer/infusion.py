"""Cross-encoder-infused dual encoders (*Can Cross Encoders Produce Useful Sentence
Embeddings?*): building them from a cross-encoder and training them.

:func:`infuse` builds DE-(N+M)-CE (or DE-(N+M)-Rand): the cross-encoder's embeddings and first N
layers, M new layers. Two ways to train a DE-2-CE (or DE-2-Rand):

* ``mnrl`` (as in the paper): sentence-transformers' ``SentenceTransformerTrainer`` with
  ``MultipleNegativesRankingLoss`` on (query, positive, BM25 hard negative) triplets, negatives
  mined with ``bm25s`` (:mod:`dense_encoders.data.bm25`: top BM25 documents that are not judged relevant);
* ``distill``: our ``DistillationTrainer`` with the cross-encoder's own scores on the BM25
  candidates as teacher (``score_teacher``), losses configurable (default Margin-MSE + InfoNCE).

:class:`InfusionArguments` (the flags of ``dense-encoders infuse``) says what to train how;
:func:`train_infused` trains it and writes each model's ``infusion_setup.json`` and model card. The retrieve
+ rerank report of the trained encoders is :mod:`dense_encoders.evaluation.infusion_report`;
:func:`record_infusion_report` puts it into each model's folder (``report.json``), whose card reports it.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path

import torch
from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
from sentence_transformers.sentence_transformer.training_args import BatchSamplers

from ..checkpoints.folder import native_pooling, source_reference, write_sentence_transformers_files
from ..checkpoints.loading import cross_encoder_model_and_tokenizer, load_sentence_transformer
from ..data.bm25 import bm25_run, mine_bm25_triplets
from ..data.retrieval import RetrievalDataset, load_dataset_for_evaluation
from ..data.run_records import INFUSION_REPORT, INFUSION_SETUP, write_record
from ..hub import model_card
from ..models.infused import InfusedDualEncoderModel
from ..settings.infusion import METHODS, POSITIVE_FIELDS, InfusionArguments  # noqa: F401 (re-exported)
from .distillation import DistillationArguments, DistillationSetup, distill
from .output_dir import DASHED_FLAGS, output_dir_lock, prepare_output_dir, write_training_args
from .records import public_record
from .teacher import score_teacher

logger = logging.getLogger(__name__)

# fields of InfusionArguments that set up the retrieve + rerank report, not the training (not in the record)
REPORT_FIELDS = ("eval_data", "eval_split", "baseline", "rerank_top_k")
# fields of InfusionArguments that are permissions, not settings (not in the record)
PERMISSION_FIELDS = ("overwrite_output_dir", "trust_remote_code")


def infuse(
    cross_encoder,
    *,
    num_copied_layers: int = 1,
    num_new_layers: int = 1,
    random_init: bool = False,
    pooling: str = "mean",
    tokenizer=None,
    seed: int | None = 0,
    trust_remote_code: bool = False,
):
    """DE-(N+M)-CE (or -Rand) from a cross-encoder: ``(InfusedDualEncoderModel, tokenizer)``; a cross-encoder
    folder or Hub id that runs code of its own is refused unless ``trust_remote_code``."""
    model, tokenizer = cross_encoder_model_and_tokenizer(cross_encoder, tokenizer, trust_remote_code=trust_remote_code)
    name = str(cross_encoder) if isinstance(cross_encoder, (str, Path)) else getattr(model, "name_or_path", None)
    name = source_reference(name)["name"] if name else None  # saved in config.json: a Hub id or a name, no path
    if seed is not None:
        torch.manual_seed(seed)
    dual = InfusedDualEncoderModel.from_cross_encoder(
        model, num_copied_layers=num_copied_layers, num_new_layers=num_new_layers, random_init=random_init,
        pooling=pooling, infused_from=name or None,
    )
    return dual, tokenizer


def save_dual_encoder(model, tokenizer, folder: str | Path, similarity: str = "cosine") -> Path:
    """Weights, remote code, tokenizer and sentence-transformers files (pooling from the config)."""
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
    import datasets  # slow to import; only this training method needs it

    # the infused dual encoder just saved: ours, loaded by the installed classes (weight-checked, as every load)
    model = load_sentence_transformer(str(model_folder), device="cpu" if _no_gpu() else None)
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
    write_training_args(args, output_dir)  # JSON, never the Trainer's pickle
    return Path(output_dir)


def _no_gpu() -> bool:
    return not torch.cuda.is_available()


def train_infused(args: InfusionArguments) -> dict[str, Path]:
    """Train the dual encoders ``args`` asks for (:meth:`InfusionArguments.models`) into ``args.output_dir``,
    which is checked (or cleared) once for all of them
    (:func:`dense_encoders.trainer.output_dir.prepare_output_dir`). Each model's folder also gets its
    ``infusion_setup.json`` and model card (:func:`write_infusion_record`). Returns name -> folder. The run holds
    the folder's lock throughout (:func:`~dense_encoders.trainer.output_dir.output_dir_lock`)."""
    args.check_graded_pairs()
    train_revision, _ = args.dataset_revisions()  # refused before the folder is touched when no data is a Hub id
    with output_dir_lock(args.output_dir, flags=DASHED_FLAGS):
        prepare_output_dir(Path(args.output_dir), overwrite=args.overwrite_output_dir, flags=DASHED_FLAGS,
                           inputs=(args.cross_encoder, args.train_data, args.eval_data, args.baseline))
        dataset = load_dataset_for_evaluation(args.train_data, split=args.split, revision=train_revision,
                                              **args.graded_pair_options(args.train_data))
        trained = {}
        for name, (folder, random_init) in args.models().items():
            trained[name] = train_dual_encoder(args, dataset, folder, random_init=random_init)
            write_infusion_record(folder, name, args)
    return trained


def train_dual_encoder(args: InfusionArguments, dataset: RetrievalDataset, output_dir: str | Path, *,
                       random_init: bool = False) -> Path:
    """Build DE-(N+M)-CE (or -Rand with ``random_init``) from ``args.cross_encoder`` and train it on ``dataset``
    by ``args.method`` (module doc) into ``output_dir``, its initial weights in ``output_dir/initial``. Returns
    ``output_dir``; the folder is not checked here (:func:`train_infused` checks it)."""
    output_dir = Path(output_dir)
    initial = output_dir / "initial"
    model, tokenizer = infuse(args.cross_encoder, num_copied_layers=args.num_copied_layers,
                              num_new_layers=args.num_new_layers, random_init=random_init, seed=args.seed,
                              trust_remote_code=args.trust_remote_code)
    save_dual_encoder(model, tokenizer, initial)
    run = bm25_run(dataset, args.candidates)
    if args.method == "mnrl":
        triplets = mine_bm25_triplets(dataset, negatives_from_top=args.candidates, seed=args.seed, run=run)
        logger.info("training on %d BM25 triplets", len(triplets))
        train_mnrl(initial, triplets, output_dir, epochs=args.epochs, batch_size=args.batch_size,
                   learning_rate=args.learning_rate, warmup_steps=args.warmup_steps, max_length=args.max_length,
                   seed=args.seed)
    else:
        train_file = output_dir / "teacher-scores.jsonl"
        score_teacher(args.cross_encoder, run, train_file, queries=dataset.queries, corpus=dataset.corpus,
                      top_k=args.candidates, include_texts=True, batch_size=args.batch_size,
                      trust_remote_code=args.trust_remote_code)
        setup = DistillationSetup(student=str(initial), train_file=str(train_file), losses=args.losses,
                                  documents_per_query=8, query_max_length=64, document_max_length=args.max_length)
        training = DistillationArguments(output_dir=str(output_dir), num_train_epochs=args.epochs,
                                         per_device_train_batch_size=args.batch_size,
                                         learning_rate=args.learning_rate, warmup_steps=args.warmup_steps,
                                         seed=args.seed, use_cpu=_no_gpu())
        distill(setup, training, check_output_dir=False)  # the folder already holds initial/ and the teacher scores
    return output_dir


def write_infusion_record(folder: str | Path, name: str, args: InfusionArguments) -> None:
    """``infusion_setup.json`` (what was trained how, the recipe included; not the report's settings nor the
    permissions ``overwrite_output_dir`` and ``trust_remote_code``) and the model card made from it."""
    setup = {key: value for key, value in asdict(args).items()
             if key not in (*PERMISSION_FIELDS, *REPORT_FIELDS)}
    record = public_record({"model": name, **setup})
    write_record(folder, INFUSION_SETUP, record)
    model_card(folder).save(Path(folder) / "README.md")


def record_infusion_report(trained: dict[str, str | Path], report: dict) -> None:
    """The retrieve + rerank report of the trained dual encoders (name -> folder) as each folder's
    ``report.json``, and each card made again from it (the card reports the folder's own row)."""
    for folder in trained.values():
        write_record(folder, INFUSION_REPORT, report)
        model_card(folder).save(Path(folder) / "README.md")


__all__ = [
    "METHODS",
    "InfusionArguments",
    "infuse",
    "record_infusion_report",
    "save_dual_encoder",
    "train_dual_encoder",
    "train_infused",
    "train_mnrl",
    "write_infusion_record",
]
