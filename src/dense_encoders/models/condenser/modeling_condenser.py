"""Condenser and coCondenser (Gao & Callan, 2021): a BERT encoder pre-trained through a head.

Read top to bottom: the cross-process gather and the span contrastive loss, the retrieval encoder
(:class:`CondenserModel`), then the pre-training models (:class:`CondenserForPreTraining`,
:class:`CoCondenserForPreTraining`).

Shipped as remote code next to every checkpoint: it imports ``transformers`` and ``torch``
absolutely, its configuration relatively, and nothing from ``dense_encoders``.
"""

from __future__ import annotations

import dataclasses
import json
import operator
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
import transformers
from torch import nn
from transformers import BertConfig, BertForMaskedLM
from transformers.modeling_outputs import BaseModelOutputWithPooling
from transformers.models.bert.modeling_bert import BertLayer, BertModel, BertOnlyMLMHead, BertPreTrainedModel
from transformers.utils import ModelOutput, logging

from .configuration_condenser import CondenserConfig
from .sentence_transformers_condenser import SentenceTransformersFilesMixin, StrictLoadingMixin, weights_location

logger = logging.get_logger(__name__)
# the files that hold a tokenizer's vocabulary, one enough for AutoTokenizer (as checkpoints/folder.py lists them;
# remote code imports only its siblings)
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "tokenizer.model", "spiece.model")


class _BelowErrors:
    """Logging filter: drops records below ERROR (transformers' load report while we write our own), except a report
    of shape mismatches or conversion errors: transformers raises on those, pointing at the report, or re-initialises
    the mismatched tensors with ``ignore_mismatched_sizes=True`` and the report is what names them."""

    def filter(self, record) -> bool:
        message = record.getMessage()
        return record.levelno >= logging.ERROR or "MISMATCH" in message or "CONVERSION" in message


# Config keys that exist only for Condenser; a plain BERT export drops them.
CONDENSER_ONLY_KEYS = ("n_head_layers", "skip_from", "late_mlm", "auto_map", "model_type", "architectures")
# Model types whose checkpoints have BERT's parameter layout and can be warm-started from.
BERT_LIKE_MODEL_TYPES = ("bert", "condenser")
# dense-encoders release that wrote this file
DENSE_ENCODERS_CODE_VERSION = "0.1.0"


# --------------------------------------------------------------------------------------------
# Cross-process gather and the coCondenser span contrastive loss
# --------------------------------------------------------------------------------------------


def gather_with_local_grad(local: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Concatenate ``local`` ([n_local, ...]) from every process in GLOBAL rank order.

    The local part keeps its autograd graph; the other parts are constants. Processes may hold
    different numbers of rows (partial last batches): sizes are exchanged first and the
    tensors padded for the collective. Returns ``(gathered, world_size)``; without an
    initialised process group it returns ``(local, 1)``.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return local, 1
    world_size, rank = dist.get_world_size(), dist.get_rank()  # global rank, not the node-local one
    size = torch.tensor([local.shape[0]], device=local.device, dtype=torch.long)
    sizes = [torch.zeros_like(size) for _ in range(world_size)]
    dist.all_gather(sizes, size)
    sizes = [int(s.item()) for s in sizes]
    padded = local.detach().new_zeros((max(sizes), *local.shape[1:]))
    padded[: local.shape[0]] = local.detach()
    parts = [torch.empty_like(padded) for _ in range(world_size)]
    dist.all_gather(parts, padded.contiguous())
    parts = [part[:n] for part, n in zip(parts, sizes)]
    parts[rank] = local
    return torch.cat(parts, dim=0), world_size


def at_least_float32(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in float32 if it is half precision (fp16 / bf16); float32 and float64 stay as they are.

    Losses are computed in at least float32, and never below the model's precision: a float64 model
    (the equivalence tests) keeps float64 end to end.
    """
    return tensor.to(torch.promote_types(tensor.dtype, torch.float32))


def span_contrastive_loss(span_embeddings: torch.Tensor, return_num_spans: bool = False):
    r"""coCondenser's corpus-aware span contrastive loss (Gao & Callan 2022, Eq. 5).

    ``span_embeddings`` is this process's [2n, hidden] block of last-layer CLS vectors ordered
    [d1s1, d1s2, d2s1, d2s2, ...]. Spans from every process are gathered (global rank order),
    scored by raw dot product, the self-similarity is masked out and each span's target is its
    sibling (row ``i ^ 1``):

    .. math:: \mathcal{L}^{co}_{ij} = -\log \frac{\exp(\langle h_i, h_j\rangle)}
              {\sum_{k \ne i} \exp(\langle h_i, h_k\rangle)}

    Targets are built per call, so partial batches and gradient accumulation work. Under
    data parallelism the value is the global-batch loss while the gradient is scaled by the
    world size, undoing DDP's gradient averaging (each process only back-propagates through
    its own spans). With ``return_num_spans`` it returns ``(loss, rows of the score matrix)``.
    """
    if span_embeddings.dim() != 2:
        raise ValueError(f"span_embeddings must be [num_spans, hidden], got shape {tuple(span_embeddings.shape)}")
    if span_embeddings.shape[0] % 2 or span_embeddings.shape[0] == 0:
        raise ValueError(
            f"coCondenser needs spans in sibling pairs [d1s1, d1s2, d2s1, d2s2, ...]; this batch has "
            f"{span_embeddings.shape[0]} spans. Build batches with dense_encoders.data.CoCondenserCollator, "
            "which samples exactly two spans per document."
        )
    gathered, world_size = gather_with_local_grad(span_embeddings)
    gathered = at_least_float32(gathered)
    scores = gathered @ gathered.T
    scores = scores.masked_fill(torch.eye(scores.shape[0], dtype=torch.bool, device=scores.device), float("-inf"))
    targets = torch.arange(scores.shape[0], device=scores.device) ^ 1
    loss = F.cross_entropy(scores, targets)
    if world_size > 1:
        # value: the global-batch loss; gradient: world_size x (DDP averages gradients over processes)
        loss = loss * world_size - loss.detach() * (world_size - 1)
    return (loss, scores.shape[0]) if return_num_spans else loss


# --------------------------------------------------------------------------------------------
# The reference code's output folders (luyug/Condenser), which from_pretrained must not half-read
# --------------------------------------------------------------------------------------------

# The file luyug/Condenser's save_pretrained writes next to its BERT weights: the Condenser head (c_head.N.*).
REFERENCE_HEAD_FILE = "model.pt"


def refuse_reference_output_folder(name_or_path, subfolder: str = "") -> None:
    """Raise a ValueError for a local luyug/Condenser output folder: BERT masked-LM weights plus the head in
    ``model.pt`` (Gao & Callan 2021's code). ``from_pretrained`` would read the backbone and leave the head
    freshly initialised, although the folder has it; ``dense-encoders convert`` makes one checkpoint of both.

    The check reads ``config.json`` (not ours: ``model_type`` other than ``"condenser"``) and the tensor names
    of ``model.pt`` through ``torch.load(map_location="meta", weights_only=True, mmap=True)``: only the small
    pickled index is parsed (no tensor data, no arbitrary objects), which costs milliseconds and refuses only
    a real head file, not any ``model.pt``. A file that cannot be read so is left to the headless warning.
    """
    folder = os.path.join(str(name_or_path), subfolder) if subfolder else str(name_or_path)
    head_file = os.path.join(folder, REFERENCE_HEAD_FILE)
    if not os.path.isfile(head_file):
        return
    try:
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as handle:
            if json.load(handle).get("model_type") == CondenserConfig.model_type:
                return
        names = torch.load(head_file, map_location="meta", weights_only=True, mmap=True)
    except Exception:  # no or unreadable config, a non-tensor or legacy-format model.pt: not this layout
        return
    if isinstance(names, dict) and any(str(name).startswith("c_head.") for name in names):
        raise ValueError(
            f"{folder} is a luyug/Condenser output folder (BERT weights + the head in {REFERENCE_HEAD_FILE}), which "
            f"from_pretrained would load with a FRESH head. Convert it first: dense-encoders convert {folder} OUT"
        )


# --------------------------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------------------------


@dataclass
class CondenserForPreTrainingOutput(ModelOutput):
    """Output of :class:`CondenserForPreTraining` and :class:`CoCondenserForPreTraining`.

    Args:
        loss: sum of the losses below that were computed (each with weight 1).
        head_mlm_loss: MLM cross-entropy of the Condenser head's output (needs ``labels``).
        late_mlm_loss: MLM cross-entropy of the backbone's last layer (``config.late_mlm``).
        contrastive_loss: coCondenser span contrastive loss (coCondenser only).
        contrastive_spans: number of spans the contrastive loss scored, over all processes.
        pooler_output: ``(batch_size, hidden_size)`` last-layer CLS vectors, the retrieval embedding.
        last_hidden_state: ``(batch_size, sequence_length, hidden_size)`` backbone output.
        hidden_states: backbone hidden states (embedding output first), when requested.
        attentions: backbone attention weights, when requested (eager attention only).
    """

    loss: torch.FloatTensor | None = None
    head_mlm_loss: torch.FloatTensor | None = None
    late_mlm_loss: torch.FloatTensor | None = None
    contrastive_loss: torch.FloatTensor | None = None
    contrastive_spans: int | None = None
    pooler_output: torch.FloatTensor | None = None
    last_hidden_state: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None


def hidden_state_selection(output_hidden_states) -> list[int] | None:
    """The indices an ``output_hidden_states`` that is not a flag selects, as transformers takes them (an index or a
    list of indices, negative ones counting from the end); ``None`` for a flag (bool or None), a TypeError for
    anything else."""
    if output_hidden_states is None or isinstance(output_hidden_states, bool):
        return None
    indices = output_hidden_states if isinstance(output_hidden_states, (list, tuple)) else [output_hidden_states]
    try:
        return [operator.index(index) for index in indices]
    except TypeError:
        raise TypeError(
            f"output_hidden_states={output_hidden_states!r}: pass True / False, or the index or list of indices of "
            "the hidden states to return (0 = embeddings, -1 = last layer)"
        ) from None


def selected_hidden_states(
    hidden_states: tuple[torch.Tensor, ...], output_hidden_states
) -> tuple[torch.Tensor | None, ...] | None:
    """The ``hidden_states`` that ``output_hidden_states`` asks for, as ``BertModel`` gives them: ``None`` for a false
    value, all for ``True``, and for an index or list of indices (:func:`hidden_state_selection`) the same tuple
    with ``None`` in place of the states not selected (out-of-range indices select nothing)."""
    selection = hidden_state_selection(output_hidden_states)
    if not output_hidden_states:
        return None
    if selection is None:
        return hidden_states
    count = len(hidden_states)
    kept = {index % count for index in selection if -count <= index < count}
    return tuple(state if position in kept else None for position, state in enumerate(hidden_states))


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


class CondenserPreTrainedModel(StrictLoadingMixin, SentenceTransformersFilesMixin, BertPreTrainedModel):
    """Shared base: BERT's weight init and attention back-ends (eager / sdpa / flash), Condenser config.

    ``save_pretrained`` also writes the sentence-transformers files of the encoder inside (CLS, dot).
    """

    config_class = CondenserConfig
    config: CondenserConfig
    base_model_prefix = "bert"
    # plain BERT checkpoints carry a pooler; pre-training checkpoints carry the heads
    _keys_to_ignore_on_load_unexpected = [r"(^|\.)pooler\.", r"^c_head\.", r"^cls\."]

    @classmethod
    def native_sentence_transformers_pipeline(cls, config) -> tuple[str, str]:
        """The last layer's [CLS] vector, compared by dot product (Condenser, Sec. 4)."""
        return "cls", "dot"

    def export_backbone(self, save_directory: str | os.PathLike, tokenizer=None, **save_kwargs) -> None:
        """Write the backbone as a plain BERT checkpoint (safetensors, no remote code).

        From a pre-training model the export is a ``BertForMaskedLM`` (backbone + MLM head, the
        layout the reference code saved); from :class:`CondenserModel` it is a ``BertModel``.
        Tools that know nothing of Condenser load it with ``AutoModel`` / ``BertModel``. A model carries no
        tokenizer: pass ``tokenizer`` (the backbone's) and it is saved alongside, as those tools (and
        ``dense-encoders pretrain --backbone``) need it; a folder left without one gets a warning.
        """
        backbone = self.bert if hasattr(self, "bert") else self
        config_dict = {k: v for k, v in self.config.to_dict().items() if k not in CONDENSER_ONLY_KEYS}
        bert_config = BertConfig(**config_dict)
        mlm_head = getattr(self, "cls", None)
        if mlm_head is not None:
            bert_config.architectures = ["BertForMaskedLM"]
            plain = BertForMaskedLM(bert_config)
            plain.bert.load_state_dict(backbone.state_dict())
            plain.cls.load_state_dict(mlm_head.state_dict())
        else:
            bert_config.architectures = ["BertModel"]
            plain = BertModel(bert_config, add_pooling_layer=False)
            plain.load_state_dict(backbone.state_dict())
        plain.to(dtype=next(self.parameters()).dtype)
        save_kwargs.pop("safe_serialization", None)
        plain.save_pretrained(save_directory, **save_kwargs)
        if tokenizer is not None:
            tokenizer.save_pretrained(save_directory)
        elif not any(os.path.isfile(os.path.join(save_directory, name)) for name in TOKENIZER_FILES):
            logger.warning(
                f"export_backbone: {save_directory} holds no tokenizer, which BERT tools need to load it; pass "
                "tokenizer= (the backbone's, e.g. AutoTokenizer.from_pretrained('bert-base-uncased'))"
            )


class CondenserModel(StrictLoadingMixin, SentenceTransformersFilesMixin, BertModel):
    """The Condenser retrieval encoder: a BERT backbone, no pooler weights.

    ``pooler_output`` is the last layer's CLS vector, the embedding the papers retrieve with
    (dot product). Hidden states equal ``transformers.BertModel``'s on the same weights.
    """

    config_class = CondenserConfig
    config: CondenserConfig
    _keys_to_ignore_on_load_unexpected = CondenserPreTrainedModel._keys_to_ignore_on_load_unexpected
    export_backbone = CondenserPreTrainedModel.export_backbone
    native_sentence_transformers_pipeline = CondenserPreTrainedModel.native_sentence_transformers_pipeline

    def __init__(self, config: CondenserConfig, add_pooling_layer: bool = False):
        if add_pooling_layer:
            raise ValueError(
                "CondenserModel has no pooler weights: its pooler_output is the last-layer CLS vector. "
                "Leave add_pooling_layer=False."
            )
        super().__init__(config, add_pooling_layer=False)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """``PreTrainedModel.from_pretrained``; a luyug/Condenser output folder is refused with the
        command that converts it (:func:`refuse_reference_output_folder`)."""
        if pretrained_model_name_or_path is not None:  # None: weights given as state_dict=
            refuse_reference_output_folder(pretrained_model_name_or_path, kwargs.get("subfolder", ""))
        return super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPooling | tuple:
        """Encode a batch; ``pooler_output`` ``(batch_size, hidden_size)`` is the last-layer CLS.

        As ``BertModel``: ``return_dict`` and the ``output_*`` flags default to the config's; ``return_dict=False``
        gives ``to_tuple()`` of the output.
        """
        reference = input_ids if input_ids is not None else inputs_embeds
        if reference is not None and (reference.dim() < 2 or reference.shape[1] == 0):
            raise ValueError(
                f"Empty input (shape {tuple(reference.shape)}): every text needs at least one token. "
                "Tokenize with add_special_tokens=True so each row starts with [CLS]."
            )
        hidden_state_selection(kwargs.get("output_hidden_states"))  # a clear TypeError for a bad one
        outputs = super().forward(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        result = BaseModelOutputWithPooling(
            last_hidden_state=outputs.last_hidden_state,
            pooler_output=outputs.last_hidden_state[:, 0],
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return result if return_dict else result.to_tuple()


class CondenserForPreTraining(CondenserPreTrainedModel):
    """Condenser pre-training (Gao & Callan 2021, Sec. 3): backbone + Condenser head + shared MLM head.

    The head's ``n_head_layers`` fresh transformer layers read ``[h^{late}_{cls}; h^{early}_{1:}]``:
    the LAST layer's CLS vector followed by the non-CLS token states of ``hidden_states[skip_from]``
    (skip connection). Both the head output and, with ``late_mlm``, the backbone's last layer are
    trained with MLM through ONE prediction head (tied to the input embeddings):
    ``loss = L_mlm(head) + L_mlm(late)`` (paper Eq. 7-8). MLM logits are computed only at masked
    positions, which gives the same loss as scoring every position.
    """

    fresh_weight_prefixes = ("c_head.", "cls.")  # the heads on a backbone checkpoint: warned about below
    _tied_weights_keys = {
        "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    }
    # One loss per micro-batch (mean over its masked tokens): Trainer scales for accumulation.
    accepts_loss_kwargs = False
    _keys_to_ignore_on_load_unexpected = [r"(^|\.)pooler\.", r"^cls\.seq_relationship\."]

    def __init__(self, config: CondenserConfig):
        super().__init__(config)
        CondenserConfig.validate_condenser(config)  # settings may have changed since construction
        self.bert = CondenserModel(config)
        self.cls = BertOnlyMLMHead(config)
        self.c_head = nn.ModuleList([BertLayer(config, layer_idx=i) for i in range(config.n_head_layers)])
        self.post_init()

    def get_output_embeddings(self):
        return self.cls.predictions.decoder

    def set_output_embeddings(self, new_embeddings):
        self.cls.predictions.decoder = new_embeddings
        self.cls.predictions.bias = new_embeddings.bias

    def masked_lm_loss(self, hidden_states: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean MLM cross-entropy over positions with ``labels != -100`` (0 with a graph if none)."""
        selected = labels != -100
        if not bool(selected.any()):
            return hidden_states.sum() * 0.0
        logits = self.cls(hidden_states[selected])
        return F.cross_entropy(at_least_float32(logits), labels[selected])

    def condenser_head(self, backbone_outputs, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Run the head on [last-layer CLS ; hidden_states[skip_from][:, 1:]] (paper Eq. 6)."""
        late_cls = backbone_outputs.last_hidden_state[:, :1]
        early_tokens = backbone_outputs.hidden_states[self.config.skip_from][:, 1:]
        states = torch.cat([late_cls, early_tokens], dim=1)
        try:  # transformers 5: the head's pre-training needs it; encoding (CondenserModel) works on 4.53 and later
            from transformers.masking_utils import create_bidirectional_mask
        except ImportError:
            raise ImportError(
                f"Condenser pre-training needs transformers >= 5.0 (installed: {transformers.__version__}); "
                "encoding with CondenserModel works on transformers 4.53 and later.") from None
        mask = create_bidirectional_mask(config=self.config, inputs_embeds=states, attention_mask=attention_mask)
        for layer in self.c_head:
            states = layer(states, mask)
        return states

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
    ) -> CondenserForPreTrainingOutput | tuple:
        """Without ``labels`` only the backbone runs (no head, no loss).

        ``return_dict`` and the ``output_*`` flags default to the config's, as in transformers; with
        ``return_dict=False`` the output is ``to_tuple()``, the loss first when one was computed.

        Args:
            labels: ``(batch_size, sequence_length)`` original token ids at masked positions,
                -100 elsewhere (e.g. from ``dense_encoders.data.WholeWordMaskingCollator``).
            output_hidden_states: ``True`` for the backbone's hidden states (embedding output first), or the
                index or list of indices of the ones to return (the others ``None``), as ``BertModel`` takes it.
        """
        return_dict = self.config.return_dict if return_dict is None else return_dict
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        output_attentions = self.config.output_attentions if output_attentions is None else output_attentions
        backbone = self.bert(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            output_hidden_states=True,  # the head reads hidden_states[skip_from]
            output_attentions=output_attentions,
            return_dict=True,
        )
        hidden_states = selected_hidden_states(backbone.hidden_states, output_hidden_states)
        loss = head_mlm_loss = late_mlm_loss = None
        if labels is not None:
            head_mlm_loss = loss = self.masked_lm_loss(self.condenser_head(backbone, attention_mask), labels)
            if self.config.late_mlm:
                late_mlm_loss = self.masked_lm_loss(backbone.last_hidden_state, labels)
                loss = loss + late_mlm_loss
        # built once, every field at hand: a field ModelOutput gets after construction goes to the end of to_tuple()
        output = CondenserForPreTrainingOutput(
            loss=loss,
            head_mlm_loss=head_mlm_loss,
            late_mlm_loss=late_mlm_loss,
            pooler_output=backbone.pooler_output,
            last_hidden_state=backbone.last_hidden_state,
            hidden_states=hidden_states,
            attentions=backbone.attentions,
        )
        return output if return_dict else output.to_tuple()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """``PreTrainedModel.from_pretrained``, plus a clear warning when the checkpoint has no head.

        Hub copies of the reference checkpoints (Luyu/condenser, Luyu/co-condenser-*) are
        headless: pre-training on from them trains a random head first. A local output folder of the
        reference code, whose head sits in ``model.pt``, is refused with the command that converts it
        (:func:`refuse_reference_output_folder`).
        """
        if pretrained_model_name_or_path is not None:  # None: weights given as state_dict=
            refuse_reference_output_folder(pretrained_model_name_or_path, kwargs.get("subfolder", ""))
        want_info = kwargs.pop("output_loading_info", False)
        # transformers' load report (a line per missing head tensor) is replaced by the warnings below
        report_logger = logging.get_logger("transformers.modeling_utils")
        below_errors = _BelowErrors()
        report_logger.addFilter(below_errors)
        try:
            model, info = super().from_pretrained(
                pretrained_model_name_or_path, *model_args, output_loading_info=True, **kwargs
            )
        finally:
            report_logger.removeFilter(below_errors)
        source = weights_location(None) if pretrained_model_name_or_path is None else pretrained_model_name_or_path
        missing = set(info.get("missing_keys", ()))
        no_mlm_head = any(key.startswith("cls.predictions.transform.") for key in missing)
        if any(key.startswith("c_head.") for key in missing):
            logger.warning(
                f"{source} has no Condenser head (c_head.*"
                f"{', nor an MLM prediction head' if no_mlm_head else ''}): the head of this "
                f"{cls.__name__} is FRESHLY INITIALISED. Continuing pre-training from a headless checkpoint "
                "(such as the Hub copies of the reference models) first trains a random head, whose gradients "
                "can corrupt the backbone; start from a checkpoint saved by CondenserForPreTraining.save_pretrained "
                "to keep the head, or warm-start deliberately with "
                "dense_encoders.from_backbone(CondenserForPreTraining, BERT_CHECKPOINT)."
            )
        elif no_mlm_head:
            logger.warning(
                f"{source} has no MLM prediction head (cls.predictions.*): it was freshly "
                "initialised (the decoder stays tied to the input embeddings)."
            )
        other = sorted(key for key in missing if not key.startswith(("c_head.", "cls.predictions.")))
        unexpected = sorted(info.get("unexpected_keys", ()))
        if other or unexpected:  # what the silenced report would have said beyond the heads
            logger.warning(
                f"{source}: {len(other)} weights missing from the checkpoint were randomly "
                f"initialised {other[:5]}; {len(unexpected)} checkpoint tensors were not used {unexpected[:5]}."
            )
        return (model, info) if want_info else model


class CoCondenserForPreTraining(CondenserForPreTraining):
    """coCondenser (Gao & Callan 2022): Condenser + corpus-aware span contrastive loss.

    Batches hold two spans per document, ordered [d1s1, d1s2, d2s1, d2s2, ...].
    ``loss = L_mlm(head) + L_mlm(late) + L_co`` (Eq. 7), each weight 1. The contrastive loss sees
    the spans of every process (see :func:`span_contrastive_loss`). Same parameters as
    :class:`CondenserForPreTraining`: checkpoints of the two load into each other.
    """

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
        compute_contrastive_loss: bool = True,
    ) -> CondenserForPreTrainingOutput | tuple:
        """As :meth:`CondenserForPreTraining.forward`, plus the span contrastive loss.

        Args:
            compute_contrastive_loss: set False to get only the MLM losses (used by the
                gradient cache, which computes the contrastive loss over all chunks at once).
        """
        output = super().forward(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            labels=labels,
            output_hidden_states=output_hidden_states,
            output_attentions=output_attentions,
            return_dict=True,
        )
        if compute_contrastive_loss:
            contrastive_loss, contrastive_spans = span_contrastive_loss(output.pooler_output, return_num_spans=True)
            # a new output, not fields set on the old one: the loss keeps its place first in to_tuple()
            output = dataclasses.replace(
                output,
                loss=contrastive_loss if output.loss is None else output.loss + contrastive_loss,
                contrastive_loss=contrastive_loss,
                contrastive_spans=contrastive_spans,
            )
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return output if return_dict else output.to_tuple()


CondenserModel.register_for_auto_class("AutoModel")
CondenserForPreTraining.register_for_auto_class("AutoModelForPreTraining")
CoCondenserForPreTraining.register_for_auto_class("AutoModelForPreTraining")

__all__ = [
    "CondenserPreTrainedModel",
    "CondenserModel",
    "CondenserForPreTraining",
    "CoCondenserForPreTraining",
    "CondenserForPreTrainingOutput",
    "span_contrastive_loss",
    "gather_with_local_grad",
]
