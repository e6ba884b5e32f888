"""Condenser / coCondenser pre-training on ``transformers.Trainer``.

The subclass adds only what the stock Trainer lacks: logging of each loss component, the
number of spans the contrastive loss saw, and an optional built-in gradient cache for
coCondenser (Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size under Memory
Limited Setup"): large contrastive batches with the memory of one chunk.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import Trainer, set_seed

from ..checkpoints.backbones import from_backbone
from ..checkpoints.folder import refuse_folder_without_tokenizer
from ..checkpoints.loading import load_checked_model
from ..checkpoints.weights import checkpoint_tensor_names
from ..data import (
    CoCondenserCollator,
    WholeWordMaskingCollator,
    add_spans,
    default_corpus_path,
    load_corpus,
    tokenize_for_condenser,
)
from ..data.corpus import JSON_EXTENSIONS, corpus_files
from ..data.files import disk_full_as_one_line
from ..data.format import DataFormatError, data_suffix, document_record, document_text, records, text_lines
from ..data.hub_datasets import revisions_for
from ..data.run_records import PRETRAINING_SETUP, TRAINER_STATE, write_record
from ..hub import model_card
from ..hub.trainer_push import HubPushMixin
from ..models.condenser.modeling_condenser import (
    CoCondenserForPreTraining,
    CondenserForPreTraining,
    at_least_float32,
    span_contrastive_loss,
)
from ..models.condenser.presets import condenser_preset
from ..models.tite import TiteForPreTraining, tite_preset
from ..settings.pretraining import (  # noqa: F401 (re-exported: --help reads them there, without torch)
    ARCHITECTURE_NAMES,
    DEFAULT_PRESETS,
    PRESETS,
    PreTrainingSetup,
    PreTrainingTrainerFields,
)
from ..tokenization import load_tokenizer
from .output_dir import checkpoint_bytes, output_dir_lock, prepare_trainer_output_dir, write_training_args
from .processes import OneModelTrainingArguments
from .records import check_mixed_precision, public_record, write_earlier_stages, write_training_environment
from .resume import EpochSeededSamplingMixin, StopAtMaxStepsMixin

logger = logging.getLogger(__name__)
ARCHITECTURES = dict(zip(ARCHITECTURE_NAMES, (CondenserForPreTraining, CoCondenserForPreTraining, TiteForPreTraining)))


@dataclass
class PreTrainingArguments(PreTrainingTrainerFields, OneModelTrainingArguments):
    """``TrainingArguments`` plus the gradient cache switch (paper recipe defaults for the rest): the fields of
    :class:`~dense_encoders.settings.pretraining.PreTrainingTrainerFields`."""

    def __post_init__(self):
        super().__post_init__()
        if self.grad_cache_chunk_size is not None and self.grad_cache_chunk_size < 1:
            raise ValueError(
                f"grad_cache_chunk_size={self.grad_cache_chunk_size}: use a positive number of spans per chunk, "
                "or leave it unset to disable the gradient cache."
            )


class RandomState:
    """The CPU (and current CUDA device) RNG state, to replay dropout exactly in a re-run."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    @contextlib.contextmanager
    def replay(self):
        devices = [self.device] if self.cuda is not None else []
        with torch.random.fork_rng(devices=devices):
            torch.set_rng_state(self.cpu)
            if self.cuda is not None:
                torch.cuda.set_rng_state(self.cuda, self.device)
            yield


def split_batch(inputs: dict[str, torch.Tensor], chunk_size: int) -> list[dict[str, torch.Tensor]]:
    """Split every tensor of a batch along its first axis into chunks of ``chunk_size`` rows."""
    size = next(iter(inputs.values())).shape[0]
    return [{k: v[start : start + chunk_size] for k, v in inputs.items()} for start in range(0, size, chunk_size)]


class PreTrainingTrainer(StopAtMaxStepsMixin, EpochSeededSamplingMixin, HubPushMixin, Trainer):
    """The Trainer of every pre-training objective: Condenser, coCondenser and TITE (MAE + BOW).

    Logs ``head_mlm_loss``, ``late_mlm_loss``, ``contrastive_loss`` (means over the logging
    window, averaged over processes) and ``contrastive_spans`` (rows of the score matrix the
    contrastive loss saw: the GLOBAL batch under data parallelism).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._component_sums: dict[str, float] = {}
        self._component_counts: dict[str, int] = {}

    # ---- saving ----------------------------------------------------------------------------
    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        """The Trainer's save, with the arguments as ``training_args.json`` instead of a pickle."""
        super()._save(output_dir, state_dict=state_dict)
        if self.args.should_save:
            write_training_args(self.args, output_dir if output_dir is not None else self.args.output_dir)

    def _issue_warnings_after_load(self, load_result) -> None:
        """On resume: tied weights (the MLM / bag-of-words decoders) are never saved; they are tied
        again instead of being reported as missing keys. Anything else still is."""
        tied = set(getattr(self.model, "all_tied_weights_keys", None) or {})
        missing = [key for key in load_result.missing_keys if key not in tied]
        if len(missing) < len(load_result.missing_keys):
            self.model.tie_weights()
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing))

    # ---- logging -------------------------------------------------------------------------
    def _record(self, name: str, value: torch.Tensor | float | None) -> None:
        if value is None:
            return
        # tensors stay on the device until logging: no host sync per step
        value = value.detach().float() if torch.is_tensor(value) else float(value)
        self._component_sums[name] = self._component_sums.get(name, 0.0) + value
        self._component_counts[name] = self._component_counts.get(name, 0) + 1

    def _record_outputs(self, outputs) -> None:
        for name in list(outputs.keys()):
            if (name.endswith("_loss") or name == "contrastive_spans") and name != "loss":
                self._record(name, outputs.get(name))

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self._component_sums:
            names = sorted(self._component_sums)
            means = torch.tensor(
                [float(self._component_sums[n]) / self._component_counts[n] for n in names], device=self.args.device
            )
            if self.args.world_size > 1:
                means = self.accelerator.reduce(means, reduction="mean")
            for name, value in zip(names, means.tolist()):
                logs[name] = round(value, 4) if name != "contrastive_spans" else int(round(value))
            self._component_sums.clear()
            self._component_counts.clear()
        super().log(logs, start_time)

    # ---- loss ----------------------------------------------------------------------------
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(**inputs)
        if model.training:
            self._record_outputs(outputs)
        loss = outputs["loss"]
        return (loss, outputs) if return_outputs else loss

    def training_step(self, model, inputs, num_items_in_batch=None):
        chunk = getattr(self.args, "grad_cache_chunk_size", None)
        unwrapped = self.accelerator.unwrap_model(model)
        if not chunk or not _has_contrastive_loss(type(unwrapped)):
            return super().training_step(model, inputs, num_items_in_batch)
        model.train()
        inputs = self._prepare_inputs(inputs)
        if inputs["input_ids"].shape[0] <= chunk:
            return super().training_step(model, inputs, num_items_in_batch)
        return self._grad_cache_step(model, unwrapped, inputs, chunk)

    def _grad_cache_step(self, model, unwrapped, inputs, chunk_size: int) -> torch.Tensor:
        """One coCondenser step through the gradient cache (same gradients, one chunk of memory)."""
        chunks = split_batch(inputs, chunk_size)
        scale = 1.0 / self.current_gradient_accumulation_steps
        # 1. representations without a graph, remembering each chunk's RNG state (dropout)
        states, span_embeddings = [], []
        with torch.no_grad(), self.accelerator.autocast():
            for piece in chunks:
                states.append(RandomState(piece["input_ids"].device))
                encoded = unwrapped.bert(
                    input_ids=piece["input_ids"],
                    attention_mask=piece.get("attention_mask"),
                    token_type_ids=piece.get("token_type_ids"),
                )
                span_embeddings.append(encoded.pooler_output)
        # 2. contrastive loss over the whole batch, gradients w.r.t. the cached representations
        span_embeddings = at_least_float32(torch.cat(span_embeddings).detach()).requires_grad_()
        contrastive, num_spans = span_contrastive_loss(span_embeddings, return_num_spans=True)
        (embedding_grads,) = torch.autograd.grad(contrastive, span_embeddings)
        embedding_grads = embedding_grads.split([piece["input_ids"].shape[0] for piece in chunks])
        # 3. re-run each chunk with the same RNG; surrogate loss carries the cached gradients
        labels = inputs.get("labels")
        total_masked = max(int((labels != -100).sum()), 1) if labels is not None else 1
        head_total = late_total = 0.0
        for index, (piece, state, grads) in enumerate(zip(chunks, states, embedding_grads)):
            last = index == len(chunks) - 1
            sync = contextlib.nullcontext() if last else self.accelerator.no_sync(model)
            with sync, state.replay(), self.compute_loss_context_manager():
                outputs = model(**piece, compute_contrastive_loss=False)
                surrogate = (at_least_float32(outputs.pooler_output) * grads).sum()
                if labels is not None:
                    weight = int((piece["labels"] != -100).sum()) / total_masked
                    surrogate = surrogate + weight * outputs.head_mlm_loss
                    head_total += weight * float(outputs.head_mlm_loss.detach())
                    if outputs.late_mlm_loss is not None:
                        surrogate = surrogate + weight * outputs.late_mlm_loss
                        late_total += weight * float(outputs.late_mlm_loss.detach())
            self.accelerator.backward(surrogate * scale)
        components = {"contrastive_loss": contrastive.detach(), "contrastive_spans": num_spans}
        if labels is not None:
            components["head_mlm_loss"] = head_total
            if unwrapped.config.late_mlm:
                components["late_mlm_loss"] = late_total
        self._record_outputs(components)
        total = float(contrastive.detach()) + head_total + late_total
        return torch.tensor(total * scale, dtype=contrastive.dtype, device=self.args.device)


@functools.lru_cache(maxsize=None)
def _has_contrastive_loss(model_class: type) -> bool:
    """Whether the model computes coCondenser's contrastive loss (also for remote-code classes)."""
    return "compute_contrastive_loss" in inspect.signature(model_class.forward).parameters


def build_model(setup: PreTrainingSetup, vocab_size: int):
    """The pre-training model named by ``setup`` (warm start, continued checkpoint, or preset). The weight files of
    ``--backbone`` / ``--init_from`` are read first: a damaged one, or one holding pickled objects, is one line
    naming it (:func:`~dense_encoders.checkpoints.weights.checkpoint_tensor_names`)."""
    model_class = ARCHITECTURES[setup.architecture]
    if setup.init_from or setup.backbone:
        checkpoint_tensor_names(setup.init_from or setup.backbone)
    if setup.init_from:
        return load_checked_model(setup.init_from, auto_class=model_class)
    if setup.architecture == "tite":
        if setup.backbone:
            return from_backbone(model_class, setup.backbone, tite_preset(setup.preset) if setup.preset else None)
        return model_class(tite_preset(setup.preset or DEFAULT_PRESETS["tite"], vocab_size=vocab_size))
    head = dict(n_head_layers=setup.n_head_layers, late_mlm=setup.late_mlm)
    if setup.backbone:
        return from_backbone(model_class, setup.backbone, skip_from=setup.skip_from, **head)
    overrides = dict(head, vocab_size=vocab_size, max_position_embeddings=max(setup.max_seq_length, 32))
    if setup.skip_from is not None:
        overrides["skip_from"] = setup.skip_from
    return model_class(condenser_preset(setup.preset or DEFAULT_PRESETS[setup.architecture], **overrides))


def build_dataset_and_collator(setup: PreTrainingSetup, tokenizer, seed: int | None = None):
    """Tokenized corpus (blocks for Condenser, span lists for coCondenser) and its collator.

    With ``seed``, spans and masks are a function of (seed, epoch, example) only, so a resumed
    run sees exactly the batches of an uninterrupted one.
    """
    corpus = load_corpus(setup.corpus or default_corpus_path(), streaming=setup.streaming,
                         revision=setup.dataset_revision)
    if setup.architecture == "cocondenser":
        dataset = add_spans(
            corpus, tokenizer, min_span_tokens=setup.min_span_tokens, max_span_tokens=setup.max_span_tokens, seed=seed
        )
        collator = CoCondenserCollator(
            tokenizer, max_length=setup.max_seq_length, mlm_probability=setup.mlm_probability, seed=seed
        )
    else:
        dataset = tokenize_for_condenser(corpus, tokenizer, max_length=setup.max_seq_length)
        collator = WholeWordMaskingCollator(
            tokenizer, max_length=setup.max_seq_length, mlm_probability=setup.mlm_probability, seed=seed
        )
    return dataset, collator


def _has_document(path, record, line_number: int) -> bool:
    """Whether a corpus record holds a non-blank document; a malformed one counts as none (the loader reports it
    with ``file:line``)."""
    try:
        return isinstance(record, dict) and bool(document_text(document_record(path, line_number, record)))
    except DataFormatError:
        return False


def check_corpus(source, *, streaming: bool = False, revision: str | None = None) -> None:
    """A pre-training corpus file (or folder, or Hub dataset at ``revision``) has at least one document, and is
    UTF-8 text, complete where gzip-compressed: read by :func:`~dense_encoders.data.format.text_lines`, the reader
    of every command, so errors name ``file:line`` (from 1) as theirs do, before any folder is made or model
    loaded. Non-streaming corpora are read in full (the loader reads them anyway); a streamed one only up to its
    first document."""
    files = corpus_files(source, revision=revision, streaming=streaming)
    found = False
    for path in files:
        if data_suffix(path) == ".parquet":  # records, not lines: the loader reads the rest
            found = found or any(_has_document(path, record, row) for row, record in records(path))
            if found and streaming:
                return
            continue
        is_json = data_suffix(path) in JSON_EXTENSIONS
        for line_number, line in text_lines(path):  # the readers' own lines: one message for bad bytes or gzip
            if found or not line.strip():
                continue
            if not is_json:
                found = True
            else:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # the loader reports it with file:line
                found = _has_document(path, record, line_number)
            if found and streaming:
                return
    if not found:
        what = "a JSON object with a non-blank 'text' or 'contents' (or 'title')" if any(
            data_suffix(p) in JSON_EXTENSIONS for p in files) else "a non-blank line"
        raise ValueError(
            f"{source} has no text: it is empty or every document is blank; give a corpus with at least "
            f"one document ({what} per document)"
        )


def pretraining_record(setup: PreTrainingSetup, config) -> dict:
    """``pretraining_setup.json``: the setup with the values the run used (the default preset of a model built
    from scratch; the model's ``skip_from``, ``n_head_layers`` and ``late_mlm``), every model and corpus named
    without a local path (:func:`~dense_encoders.trainer.records.public_record`)."""
    values = dict(vars(setup))
    if values["preset"] is None and not (setup.backbone or setup.init_from):
        values["preset"] = DEFAULT_PRESETS[setup.architecture]
    for key in ("skip_from", "n_head_layers", "late_mlm"):  # a continued checkpoint keeps its own head
        if getattr(config, key, None) is not None:
            values[key] = getattr(config, key)
    return public_record(values)


def pretrain(setup: PreTrainingSetup, args: PreTrainingArguments) -> Path:
    """Pre-train, then save the final model (safetensors, head included), tokenizer, trainer state,
    sentence-transformers files (CLS pooling, dot product; written by ``save_pretrained``) and a model card to
    ``args.output_dir``.
    The run holds the folder's lock throughout (:func:`~dense_encoders.trainer.output_dir.output_dir_lock`)."""
    with output_dir_lock(args.output_dir, args=args):
        return _pretrain(setup, args)


def _pretrain(setup: PreTrainingSetup, args: PreTrainingArguments) -> Path:
    """:func:`pretrain` itself, run while the folder's lock is held."""
    check_mixed_precision(args, setup.recipe)
    if setup.streaming and args.max_steps <= 0:
        raise ValueError("--streaming needs --max_steps: a streamed corpus has no known length.")
    revisions_for([setup.corpus], setup.dataset_revision)  # a revision needs a Hub dataset
    if setup.corpus:  # before any folder is made or model loaded (the bundled corpus is known good)
        check_corpus(setup.corpus, streaming=setup.streaming, revision=setup.dataset_revision)
    if setup.tokenizer is None:  # the tokenizer comes from the model folder: it must hold one
        for flag, folder in (("--backbone", setup.backbone), ("--init-from", setup.init_from)):
            if folder is not None:
                refuse_folder_without_tokenizer(folder, flag, alternative=", or pass --tokenizer NAME")
                break
    # before anything is loaded: a used folder is refused (or cleared with --overwrite_output_dir)
    checkpoint = prepare_trainer_output_dir(
        args, inputs=(setup.init_from, setup.backbone, setup.tokenizer, setup.corpus))
    set_seed(args.seed)  # the model's fresh weights (head, or all of them) too
    tokenizer = load_tokenizer(setup.tokenizer or setup.backbone or setup.init_from)
    model = build_model(setup, vocab_size=len(tokenizer))
    if setup.max_seq_length > model.config.max_position_embeddings:
        raise ValueError(
            f"--max_seq_length {setup.max_seq_length} exceeds the model's max_position_embeddings="
            f"{model.config.max_position_embeddings}; lower --max_seq_length."
        )
    if len(tokenizer) > model.config.vocab_size:
        raise ValueError(
            f"The tokenizer has {len(tokenizer)} tokens but the model's vocabulary is {model.config.vocab_size}: "
            "pass the backbone's own tokenizer with --tokenizer."
        )
    seed = args.data_seed if args.data_seed is not None else args.seed
    dataset, collator = build_dataset_and_collator(setup, tokenizer, seed=seed)
    trainer = PreTrainingTrainer(
        model=model, args=args, train_dataset=dataset, data_collator=collator, processing_class=tokenizer
    )
    # a checkpoint or the model cut short by a full disk: one line naming the folder (the checkpoints written stay)
    with disk_full_as_one_line(args.output_dir, checkpoint_bytes(model)):
        trainer.train(resume_from_checkpoint=checkpoint)
        output_dir = Path(args.output_dir)
        if trainer.is_world_process_zero():
            output_dir.mkdir(parents=True, exist_ok=True)
            final = trainer.accelerator.unwrap_model(trainer.model)
            tokenizer.model_max_length = setup.max_seq_length
            final.save_pretrained(output_dir)
            tokenizer.save_pretrained(output_dir)
            trainer.state.save_to_json(str(output_dir / TRAINER_STATE))
            write_record(output_dir, PRETRAINING_SETUP, pretraining_record(setup, final.config))
            write_earlier_stages(output_dir, setup.init_from or setup.backbone)
            write_training_environment(trainer, output_dir)
            write_training_args(args, output_dir)
            model_card(output_dir, repo_id=trainer.hub_model_id).save(output_dir / "README.md")
            logger.info("Saved %s to %s", type(final).__name__, output_dir)
    trainer.accelerator.wait_for_everyone()  # no process leaves before the model is on disk
    if args.push_to_hub:  # every process calls it; only the main one uploads
        trainer.push_to_hub(commit_message="End of pre-training")
    return output_dir


__all__ = [
    "PreTrainingTrainer",
    "PreTrainingArguments",
    "PreTrainingSetup",
    "RandomState",
    "build_dataset_and_collator",
    "build_model",
    "pretrain",
    "pretraining_record",
    "split_batch",
]
