"""Distillation of teacher scores into a dual encoder on ``transformers.Trainer``.

The student is any encoder of this package (TITE, Condenser) or any ``AutoModel`` checkpoint
(including sentence-transformers folders such as all-MiniLM-L6-v2, whose pooling and
normalisation are read from their own configuration). Queries and documents are encoded by one
:class:`DualEncoder` forward (one DDP forward per step), scored by dot product or cosine, and the
configured losses of :mod:`dense_encoders.trainer.losses` (Eq. 1, 3, 4 of Menon et al., ICML 2022,
"In Defense of Dual-Encoders for Neural Ranking"; TITE Sec. 3.4) are applied.

Normalisation: every loss is a sum over queries divided by the number of queries of the whole
optimizer step (all gradient-accumulation micro-batches on all processes, ``num_items_in_batch``),
so gradient accumulation and data parallelism give the gradient of the global mean. Under data
parallelism the embeddings of all processes are gathered (the local part keeps its graph) and every
process evaluates the losses of the GLOBAL batch: in-batch negatives span all processes, and the
gradient of each process's embeddings is complete; it is multiplied by the world size to undo
DDP's averaging while the reported value stays the global loss.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import Trainer, TrainerCallback

from ..checkpoints.folder import (
    OUR_MODEL_TYPES,
    clamp_to_positions,
    is_ours,
    native_pipeline,
    native_pooling,
    position_limit,
    sentence_transformers_settings,
    source_reference,
    write_sentence_transformers_files,
)
from ..checkpoints.loading import load_checked_model, load_config, load_tokenizer
from ..checkpoints.trust import refuse_untrusted_code
from ..data.distillation import (
    DistillationCollator,
    read_training_file,
    training_records_to_dataset,
    uses_labelled_positives,
)
from ..data.files import disk_full_as_one_line, read_json
from ..data.hub_datasets import revisions_for
from ..data.retrieval import read_dataset_part
from ..data.run_records import (
    DISTILLATION_LOSSES,
    DISTILLATION_POSITIVES,
    DISTILLATION_SETUP,
    TRAINER_STATE,
    write_record,
)
from ..hub import model_card
from ..hub.trainer_push import HubPushMixin
from ..models.condenser.modeling_condenser import gather_with_local_grad
from ..models.infused.modeling_infused import mean_pool
from ..settings.distillation import (  # noqa: F401 (re-exported: --help reads them there, without torch)
    POOLINGS,
    DistillationSetup,
    DistillationTrainerFields,
)
from ..vectors import POOLING_MODES, SIMILARITIES, refuse_mean_pooling_of_tite
from .losses import DistillationObjective, positive_set_loss_names
from .output_dir import checkpoint_bytes, output_dir_lock, prepare_trainer_output_dir, write_training_args
from .processes import OneModelTrainingArguments
from .records import check_mixed_precision, public_record, write_earlier_stages, write_training_environment
from .resume import EpochSeededSamplingMixin, StopAtMaxStepsMixin
from .teacher import META_FORMAT as TEACHER_META_FORMAT
from .teacher import meta_path

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------
# The student as one module
# --------------------------------------------------------------------------------------------


def pool(output, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """One vector per text from a transformers model output."""
    if pooling == "pooler":
        return output.pooler_output
    states = output.last_hidden_state
    if pooling == "cls":
        return states[:, 0]
    return mean_pool(states, attention_mask)


class DualEncoder(nn.Module):
    """Wraps a transformers encoder so queries and documents go through ONE module forward.

    (Two forwards of a DDP-wrapped model before one backward break DDP's gradient hooks.)
    """

    def __init__(self, encoder: nn.Module, pooling: str = "cls", similarity: str = "dot"):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling={pooling!r}: choose one of {POOLINGS}")
        if similarity not in SIMILARITIES:
            raise ValueError(f"similarity={similarity!r}: choose one of {SIMILARITIES}")
        model_type = getattr(getattr(encoder, "config", None), "model_type", None)
        if pooling == "pooler" and model_type not in OUR_MODEL_TYPES:
            raise ValueError(
                f"pooling='pooler' is for this package's models ({', '.join(OUR_MODEL_TYPES)}); a {model_type} "
                "checkpoint's pooler is an untrained or task-specific head: use pooling='cls' or 'mean'"
            )
        refuse_mean_pooling_of_tite(model_type, pooling, "pooling='pooler' (or 'cls')")
        self.encoder = encoder
        self.pooling = pooling
        self.similarity = similarity

    @property
    def config(self):
        return self.encoder.config

    def activation_checkpointing_enable(self, activation_checkpointing_kwargs=None, every_n_layers=1, offload=False):
        """Delegate (``TrainingArguments.activation_checkpointing``) to the transformers encoder."""
        if not getattr(self.encoder, "supports_gradient_checkpointing", False):
            raise ValueError(f"{type(self.encoder).__name__} does not support activation checkpointing")
        self.encoder.activation_checkpointing_enable(
            activation_checkpointing_kwargs=activation_checkpointing_kwargs, every_n_layers=every_n_layers,
            offload=offload,
        )

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        vectors = pool(self.encoder(input_ids=input_ids, attention_mask=attention_mask), attention_mask, self.pooling)
        return F.normalize(vectors, dim=-1) if self.similarity == "cosine" else vectors

    def forward(self, query_input_ids, query_attention_mask, document_input_ids, document_attention_mask, **_):
        return (self.encode(query_input_ids, query_attention_mask),
                self.encode(document_input_ids, document_attention_mask))


# --------------------------------------------------------------------------------------------
# Trainer
# --------------------------------------------------------------------------------------------


class LossPartsWindow(TrainerCallback):
    """The loss parts (``margin_mse_loss``, ...) of the logging window: their sums over the optimizer steps
    since the last log, and the number of those steps. A window starts when training begins or resumes,
    as the window of the Trainer's own ``loss`` does: a resumed run logs the mean per step of the steps it
    trained, never a sum divided by the steps of the run before it."""

    def __init__(self):
        self.sums: dict[str, torch.Tensor | float] = {}
        self.steps = 0

    def add(self, name: str, value: torch.Tensor | float) -> None:
        """Add one micro-batch's part (already divided by the queries of its whole optimizer step)."""
        self.sums[name] = self.sums.get(name, 0.0) + value  # stays on the device until logged: no host sync

    def means(self) -> dict[str, float]:
        """Each part's mean per optimizer step of the window, by name; the next window starts."""
        steps = max(1, self.steps)
        means = {name: float(value) / steps for name, value in sorted(self.sums.items())}
        self.sums.clear()
        self.steps = 0
        return means

    def on_train_begin(self, args, state, control, **kwargs):
        self.sums.clear()
        self.steps = 0

    def on_step_end(self, args, state, control, **kwargs):
        self.steps += 1


def _gradient_scaled(value: torch.Tensor, factor: float) -> torch.Tensor:
    """``value`` unchanged, its gradient multiplied by ``factor``."""
    return value if factor == 1 else value * factor - value.detach() * (factor - 1)


class DistillationTrainer(StopAtMaxStepsMixin, EpochSeededSamplingMixin, HubPushMixin, Trainer):
    """``transformers.Trainer`` for score distillation into a :class:`DualEncoder`.

    ``objective`` is a :class:`~dense_encoders.trainer.losses.DistillationObjective` (or a spec such
    as ``"margin_mse+kl+infonce"``). Logs ``loss`` and every component (``margin_mse_loss``, ...),
    means over the logging window. Saving writes the student itself (``save_pretrained``, remote
    code for our models), its tokenizer and sentence-transformers files with its pooling and
    similarity, so every checkpoint loads with ``AutoModel`` and ``SentenceTransformer``.
    """

    loss_is_scaled_for_ga = True  # compute_loss divides by the step's global number of queries

    def __init__(self, *args, objective: DistillationObjective | str = "margin_mse", **kwargs):
        super().__init__(*args, **kwargs)
        self.objective = DistillationObjective(objective) if isinstance(objective, str) else objective
        if not isinstance(self.accelerator.unwrap_model(self.model), DualEncoder):
            raise TypeError("DistillationTrainer trains a DualEncoder(encoder, pooling, similarity)")
        self.loss_parts = LossPartsWindow()
        self.add_callback(self.loss_parts)

    # ---- normalisation -------------------------------------------------------------------
    def _get_num_items_in_batch(self, batch_samples: list, device: torch.device):
        """Queries of the whole optimizer step (all micro-batches, all processes)."""
        count = torch.tensor(sum(int(b["teacher_scores"].shape[0]) for b in batch_samples), device=device)
        if self.args.world_size > 1:
            count = self.accelerator.reduce(count, reduction="sum")
        return count

    # ---- loss ----------------------------------------------------------------------------
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        queries, documents = model(**inputs)
        teacher, mask = inputs["teacher_scores"], inputs["document_mask"]
        positives = inputs.get("positives")  # P of m3se / rankdistil_b from relevance labels; None: the teacher's best
        queries, world_size = gather_with_local_grad(queries)
        documents, _ = gather_with_local_grad(documents)
        if world_size > 1:
            teacher, _ = gather_with_local_grad(teacher)
            mask = gather_with_local_grad(mask.to(torch.uint8))[0].bool()
            if positives is not None:
                positives = gather_with_local_grad(positives.to(torch.uint8))[0].bool()
        num_queries, k = teacher.shape
        student = torch.einsum("qh,qkh->qk", queries, documents.view(num_queries, k, -1))
        batch_scores = queries @ documents.T if self.objective.needs_batch_scores else None
        # the losses compute in at least float32 and never below the scores' precision (float64 stays float64)
        total, components = self.objective(student, teacher, mask, batch_scores=batch_scores, global_mask=mask,
                                           positives=positives)
        normaliser = num_items_in_batch if num_items_in_batch is not None else num_queries
        loss = _gradient_scaled(total.sum() / normaliser, world_size)
        if model.training:
            for name, values in components.items():
                self.loss_parts.add(f"{name}_loss", (values.detach().sum() / normaliser).float())
        return (loss, {"student_scores": student.detach()}) if return_outputs else loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self.loss_parts.sums:
            logs.update({name: round(value, 4) for name, value in self.loss_parts.means().items()})
        super().log(logs, start_time)

    # ---- saving / resuming ---------------------------------------------------------------
    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        dual = self.accelerator.unwrap_model(self.model)
        if not self.args.should_save:
            return
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        dual.encoder.save_pretrained(output_dir, is_main_process=True)
        tokenizer = self.processing_class or getattr(self.data_collator, "tokenizer", None)
        if tokenizer is not None:
            tokenizer.save_pretrained(output_dir)
            write_student_sentence_transformers_files(output_dir, dual.pooling, dual.similarity)
        write_training_args(self.args, output_dir)  # JSON, not the Trainer's pickle

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: nn.Module | None = None) -> None:
        dual = self.accelerator.unwrap_model(model if model is not None else self.model)
        reloaded = load_checked_model(resume_from_checkpoint, auto_class=type(dual.encoder))
        dual.encoder.load_state_dict(reloaded.state_dict())
        logger.info("student weights restored from %s", resume_from_checkpoint)


def write_student_sentence_transformers_files(folder: str | Path, pooling: str, similarity: str) -> None:
    if pooling == "pooler":  # only allowed for our models: the pooling that reproduces pooler_output
        pooling = native_pooling(load_config(folder))  # ours: the installed classes
    write_sentence_transformers_files(folder, pooling=pooling, similarity=similarity, normalize=similarity == "cosine")


# --------------------------------------------------------------------------------------------
# Setup from a checkpoint and a training file
# --------------------------------------------------------------------------------------------


@dataclass
class DistillationArguments(DistillationTrainerFields, OneModelTrainingArguments):
    """``TrainingArguments`` with defaults for distillation (TITE fine-tuning, Sec. 4.1): the fields of
    :class:`~dense_encoders.settings.distillation.DistillationTrainerFields`."""

    def __post_init__(self):
        # checkpoints are off by default (unlike TrainingArguments), but --save_steps alone asks for them
        if self.save_strategy is None:
            self.save_strategy = "steps" if self.save_steps is not None else "no"
        if self.save_steps is None:
            self.save_steps = 500  # TrainingArguments' default
        if self.train_sampling_strategy in ("group_by_length", "batch_rebalance"):
            raise ValueError(
                f"--train_sampling_strategy {self.train_sampling_strategy}: distill has no token lengths to sort by "
                "(an example is a query with its documents, tokenized by the collator); use 'random' (the default) "
                "or 'sequential'"
            )
        super().__post_init__()


def student_conventions(name_or_path: str, *, trust_remote_code: bool = False) -> tuple[str | None, str | None, str]:
    """(pooling, similarity, transformer folder) a checkpoint declares: sentence-transformers files
    first (:func:`~dense_encoders.checkpoints.folder.sentence_transformers_settings`), then our model types
    (pooler_output, their native similarity); (None, None, path) when nothing is declared. A checkpoint that runs
    code of its own is refused unless ``trust_remote_code``
    (:func:`~dense_encoders.checkpoints.trust.refuse_untrusted_code`)."""
    refuse_untrusted_code(name_or_path, trust_remote_code)
    declared = sentence_transformers_settings(name_or_path)
    if declared:
        pooling = declared["pooling"]
        if pooling is not None and pooling not in POOLING_MODES:
            raise ValueError(f"{name_or_path} pools with {pooling!r}; distillation supports cls and mean pooling")
        # sentence-transformers' default similarity is cosine
        similarity = "cosine" if declared["normalize"] or (declared["similarity"] or "cosine") == "cosine" else "dot"
        path = declared["transformer_path"] or ""
        folder = str(Path(name_or_path) / path) if path and Path(name_or_path).is_dir() else name_or_path
        transformer = declared["transformer_path"] is not None
        if transformer and is_ours(load_config(folder, trust_remote_code=trust_remote_code)):
            pooling = "pooler"  # their sentence-transformers pooling reproduces pooler_output
        return pooling, similarity, folder
    config = load_config(name_or_path, trust_remote_code=trust_remote_code)
    if is_ours(config):
        return "pooler", native_pipeline(config)[1], name_or_path
    return None, None, name_or_path


def keep_first_layers(encoder: nn.Module, num_layers: int) -> nn.Module:
    """Truncate a BERT-family encoder to its first ``num_layers`` layers (a shallow student)."""
    layers = getattr(getattr(encoder, "encoder", None), "layer", None)
    if layers is None:
        raise ValueError(f"--student_num_layers works for BERT-family encoders, not {type(encoder).__name__}")
    if not 1 <= num_layers <= len(layers):
        raise ValueError(f"--student_num_layers {num_layers}: the student has {len(layers)} layers")
    encoder.encoder.layer = layers[:num_layers]
    encoder.config.num_hidden_layers = num_layers
    return encoder


def build_student(setup: DistillationSetup) -> DualEncoder:
    """The student as a :class:`DualEncoder`; a checkpoint whose weights miss (or add) tensors of its model
    is refused unless ``setup.allow_missing_weights`` (training from partly random weights is not a warm start),
    one that runs code of its own unless ``setup.trust_remote_code``."""
    return _build_student(setup)[0]


def _build_student(setup: DistillationSetup) -> tuple[DualEncoder, str]:
    """:func:`build_student` and the folder of the student's transformer (where its tokenizer is)."""
    trust = setup.trust_remote_code
    refuse_untrusted_code(setup.student, trust)
    pooling, similarity, folder = student_conventions(setup.student, trust_remote_code=trust)
    pooling = setup.pooling or pooling
    if pooling is None:
        raise ValueError(
            f"{setup.student} declares no pooling (no sentence-transformers files): pass --pooling cls or mean"
        )
    encoder, loading = load_checked_model(folder, allow_missing_weights=setup.allow_missing_weights,
                                          trust_remote_code=trust, output_loading_info=True)
    pooler = getattr(encoder, "pooler", None)
    if pooling != "pooler" and isinstance(pooler, nn.Module):
        if any(key.startswith("pooler.") for key in loading.get("missing_keys", ())):
            # the checkpoint has no pooler (an MLM checkpoint): the fresh one would be random weights, saved as if
            # trained; the student has none, as its source
            encoder.pooler = None
        else:
            # the checkpoint's own pooler (MiniLM's), which the student never uses: frozen (no gradients, so DDP
            # needs no find_unused_parameters) and saved as loaded, so that the student loads as its architecture
            # expects, without a report of newly initialised weights
            pooler.requires_grad_(False)
    if setup.student_num_layers is not None:
        keep_first_layers(encoder, setup.student_num_layers)
    return DualEncoder(encoder, pooling=pooling, similarity=setup.similarity or similarity or "dot"), folder


def load_training_records(setup: DistillationSetup) -> list[dict]:
    """The training file's records, their ids resolved by ``--corpus`` / ``--queries`` (a file, a BEIR folder, or
    a Hub dataset by id at ``--dataset-revision``)."""
    sources = {"corpus": setup.corpus, "queries": setup.queries}
    revisions = revisions_for(sources.values(), setup.dataset_revision)
    corpus, queries = (None if source is None else read_dataset_part(source, part, revision=revision)
                       for (part, source), revision in zip(sources.items(), revisions))
    return read_training_file(setup.train_file, corpus=corpus, queries=queries, qrels=setup.qrels)


def positives_record(setup: DistillationSetup, records: list[dict],
                     objective: DistillationObjective | None = None) -> dict:
    """Where P of the losses that read a positive set (m3se / rankdistil_b) comes from and for how many
    queries (``distillation_positives.json``); ``objective``: ``setup.build_objective()`` when None."""
    objective = objective if objective is not None else setup.build_objective()
    labelled = sum(uses_labelled_positives(r, setup.documents_per_query, setup.relevance_level) for r in records)
    if not any(r.get("relevance") is not None for r in records):
        source = None  # no labels, or labels that no configured loss uses (dropped)
    elif setup.qrels is not None:
        source = Path(setup.qrels).name
    else:
        source = f"the 'relevance' field of {Path(setup.train_file).name}"
    return {"losses": objective.positive_set_losses,
            "source": source, "relevance_level": setup.relevance_level if source else None,
            "queries": len(records), "labelled_queries": labelled, "teacher_best_queries": len(records) - labelled}


def _drop_unused_labels(setup: DistillationSetup, records: list[dict],
                        objective: DistillationObjective | None = None) -> None:
    """Relevance labels only matter to the losses that read a positive set: without them, sampling stays
    label-free. ``objective``: ``setup.build_objective()`` when None."""
    objective = objective if objective is not None else setup.build_objective()
    if objective.positive_set_losses:
        return
    if setup.qrels is not None:
        logger.warning("--qrels %s is unused: only %s take judged positives (--losses %s)",
                       setup.qrels, " and ".join(positive_set_loss_names()), setup.losses)
    for record in records:
        record["relevance"] = None


def teacher_reference(train_file: str | Path) -> dict | None:
    """The teacher that scored ``train_file``, as its ``score-teacher`` settings file (``<train_file>.meta.json``)
    names it (:func:`~dense_encoders.checkpoints.folder.source_reference`: a Hub id and revision, or a folder's
    name), with ``top_k``; None when the file has no such record (it was not written by ``score-teacher``)."""
    recorded = read_json(meta_path(train_file))
    if not isinstance(recorded, dict) or recorded.get("format") != TEACHER_META_FORMAT:
        return None
    reference = recorded.get("teacher") or source_reference(recorded.get("cross_encoder", "?"))
    return {**reference, "top_k": recorded.get("top_k")}


def distillation_record(setup: DistillationSetup, records: list[dict], lengths: dict[str, int], config) -> dict:
    """``distillation_setup.json``: the setup with the values the run used, not those asked for: the query and
    document lengths after clamping to the student's positions, the documents per query the training file gave
    (at most ``documents_per_query`` of each query's; ``documents_per_query_min`` when queries got fewer), the
    values asked for under ``requested`` where they differ, the teacher (:func:`teacher_reference`), and every
    model and file named without a local path (:func:`~dense_encoders.trainer.records.public_record`)."""
    values = dict(setup.__dict__)
    used = [min(setup.documents_per_query, len(record["documents"])) for record in records]
    actual = {"query_max_length": lengths["query"], "document_max_length": lengths["document"],
              "documents_per_query": max(used)}
    requested = {key: values[key] for key, value in actual.items() if value != values[key]}
    values.update(actual)
    if min(used) != max(used):
        values["documents_per_query_min"] = min(used)
    if {"query_max_length", "document_max_length"} & set(requested):
        values["student_positions"] = position_limit(config)
    teacher = teacher_reference(setup.train_file)
    values["teacher"] = teacher["name"] if teacher else None
    values["teacher_top_k"] = teacher["top_k"] if teacher else None
    values["teacher_kind"] = teacher.get("kind", "cross-encoder") if teacher else None
    if teacher:
        values["sources"] = {"teacher": {key: teacher[key] for key in ("name", "hub", "revision")}}
    record = public_record(values)
    if requested:
        record["requested"] = requested
    return record


def requested_setup(record: dict) -> dict:
    """The setup a ``distillation_setup.json`` says was asked for: its :class:`DistillationSetup` fields, with the
    values under ``requested`` where the run used others."""
    names = {item.name for item in fields(DistillationSetup)}
    return {**{key: value for key, value in record.items() if key in names}, **(record.get("requested") or {})}


def distill(setup: DistillationSetup, args: DistillationArguments, *, check_output_dir: bool = True) -> Path:
    """Train ``setup.student`` on ``setup.train_file`` and save it to ``args.output_dir``.

    The folder must be new or empty, or hold the run that ``args.resume_from_checkpoint`` resumes
    (``--overwrite_output_dir`` clears it first; :mod:`dense_encoders.trainer.output_dir`).
    ``check_output_dir=False``: a caller that owns the folder (``infuse``) has checked it already. The run holds
    the folder's lock throughout (:func:`~dense_encoders.trainer.output_dir.output_dir_lock`; with
    ``check_output_dir=False``, the caller holds it)."""
    with output_dir_lock(args.output_dir, args=args) if check_output_dir else contextlib.nullcontext():
        return _distill(setup, args, check_output_dir=check_output_dir)


def _distill(setup: DistillationSetup, args: DistillationArguments, *, check_output_dir: bool) -> Path:
    """:func:`distill` itself, run while the folder's lock is held."""
    check_mixed_precision(args, setup.recipe)
    if check_output_dir:  # before anything is loaded
        checkpoint = prepare_trainer_output_dir(
            args, inputs=(setup.student, setup.train_file, setup.corpus, setup.queries, setup.qrels))
    else:
        checkpoint = args.resume_from_checkpoint
    objective = setup.build_objective()
    records = load_training_records(setup)
    _drop_unused_labels(setup, records, objective)
    positives = positives_record(setup, records, objective)
    if positives["source"]:
        logger.info("P of %s: judged positives (relevance >= %d) from %s for %d of %d queries, the teacher's best "
                    "for the other %d", "/".join(positives["losses"]), setup.relevance_level, positives["source"],
                    positives["labelled_queries"], positives["queries"], positives["teacher_best_queries"])
    too_few = [r for r in records if len(r["documents"]) < objective.min_documents]
    if too_few:
        first = too_few[0]
        raise ValueError(
            f"{setup.train_file}:{first.get('line', '?')}: query {first.get('query_id')!r} "
            f"has {len(first['documents'])} "
            f"document(s) but --losses {setup.losses} needs at least {objective.min_documents} per query "
            f"({len(too_few)} such queries in all): drop them or choose losses without pairs (e.g. kl, infonce)"
        )
    dual, folder = _build_student(setup)
    tokenizer = load_tokenizer(folder, trust_remote_code=setup.trust_remote_code)
    lengths = {side: clamp_to_positions(length, dual.config, f"{side}_max_length", "the student")
               for side, length in (("query", setup.query_max_length), ("document", setup.document_max_length))}
    collator = DistillationCollator(
        tokenizer,
        documents_per_query=setup.documents_per_query,
        sampling=setup.sampling,
        query_max_length=lengths["query"],
        document_max_length=lengths["document"],
        min_documents=objective.min_documents,
        seed=args.seed,
        relevance_level=setup.relevance_level,
    )
    trainer = DistillationTrainer(
        model=dual,
        args=args,
        train_dataset=training_records_to_dataset(records),
        data_collator=collator,
        processing_class=tokenizer,
        objective=objective,
    )
    # a checkpoint or the model cut short by a full disk: one line naming the folder (the checkpoints written stay)
    with disk_full_as_one_line(args.output_dir, checkpoint_bytes(dual)):
        trainer.train(resume_from_checkpoint=checkpoint)
        output_dir = Path(args.output_dir)
        if trainer.args.should_save:  # the records first: the card (and a push) read them
            output_dir.mkdir(parents=True, exist_ok=True)
            trainer.state.save_to_json(str(output_dir / TRAINER_STATE))
            write_record(output_dir, DISTILLATION_SETUP, distillation_record(setup, records, lengths, dual.config))
            write_earlier_stages(output_dir, setup.student)
            write_record(output_dir, DISTILLATION_POSITIVES, positives)
            write_record(output_dir, DISTILLATION_LOSSES, objective.describe())
            write_training_environment(trainer, output_dir)
        trainer.save_model(args.output_dir)  # pushes too when args.push_to_hub
        if trainer.args.should_save:
            model_card(output_dir, repo_id=trainer.hub_model_id).save(output_dir / "README.md")
    trainer.accelerator.wait_for_everyone()
    return Path(args.output_dir)


__all__ = [
    "DistillationArguments",
    "DistillationSetup",
    "DistillationTrainer",
    "DualEncoder",
    "build_student",
    "distill",
    "distillation_record",
    "keep_first_layers",
    "pool",
    "requested_setup",
    "student_conventions",
    "teacher_reference",
]
