"""Model cards for every model family, rendered from a :class:`~dense_encoders.hub.card_data.DenseEncoderCardData`
that the checkpoint folder's records fill in.

Built with huggingface_hub's ``ModelCard`` / ``ModelCardData``. The folder's ``config.json`` says
what the architecture is; its run records (:mod:`dense_encoders.data.run_records`: the trainer state, the
pre-training / distillation (with its losses and positive sets) / infusion setup (with the recipe, if any) and
the training environment) say how it was trained, with the values the run used (a length clamped to the model's
positions, the documents per query the training file held) and the teacher; the earlier stages list the stages
that made the model the run started from (:mod:`dense_encoders.trainer.records`); results JSONs
of the evaluation harness (passed in, or under ``<folder>/evaluation/``) and the report of
``dense-encoders infuse`` say how well it does, and how it was searched. Models and data are named by
their Hub id and revision, or by their name only: never by a local path. Whatever the folder does not
record is left out, never invented.
"""

from __future__ import annotations

import json
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..checkpoints.folder import OUR_MODEL_TYPES, source_reference
from ..data.run_records import (
    CONVERSION,
    DISTILLATION_SETUP,
    INFUSION_SETUP,
    PRETRAINING_SETUP,
    WARM_START,
    RunRecords,
)
from ..recipes import load_recipe, recipe_differences
from .card_data import DenseEncoderCardData
from .condenser_card import COCONDENSER_BIBTEX, CONDENSER_BIBTEX, condenser_description

TITE_BIBTEX = """@inproceedings{schlatt-2025-tite,
  title = {TITE: Token-Independent Text Encoder for Information Retrieval},
  author = {Schlatt, Ferdinand and Hagen, Tim and Potthast, Martin and Hagen, Matthias},
  booktitle = {Proceedings of the 48th International ACM SIGIR Conference on Research and Development in Information Retrieval},
  year = {2025},
  doi = {10.1145/3726302.3730094}
}"""  # noqa: E501 (BibTeX as published)

CE_EMBEDDINGS_BIBTEX = """@misc{ananthakrishnan-2025-cross-encoders,
  title = {Can Cross Encoders Produce Useful Sentence Embeddings?},
  author = {Ananthakrishnan, Haritha and Dolby, Julian and Kokel, Harsha and Samulowitz, Horst and Srinivas, Kavitha},
  year = {2025},
  eprint = {2502.03552},
  archivePrefix = {arXiv}
}"""

DISTILLATION_BIBTEX = """@inproceedings{menon-2022-defense,
  title = {In Defense of Dual-Encoders for Neural Ranking},
  author = {Menon, Aditya and Jayasumana, Sadeep and Rawat, Ankit Singh and Kim, Seungyeon and Reddi, Sashank and Kumar, Sanjiv},
  booktitle = {Proceedings of the 39th International Conference on Machine Learning},
  year = {2022}
}"""  # noqa: E501 (BibTeX as published)

# the tags sentence-transformers' own cards carry (SentenceTransformerModelCardData.tags, sentence-transformers 6)
SENTENCE_TRANSFORMERS_TAGS = ["sentence-transformers", "sentence-similarity", "feature-extraction", "dense"]
# a similarity's name in a sentence
SIMILARITY_WORDS = {"dot": "dot product"}

RESULT_METRICS = {"ndcg@10": ("ndcg_at_10", "nDCG@10"), "mrr@10": ("mrr_at_10", "MRR@10"),
                  "recall@100": ("recall_at_100", "Recall@100"), "recall@1000": ("recall_at_1000", "Recall@1000"),
                  "hits@10": ("accuracy_at_10", "Hits@10")}


# the vector of a TITE whose layers do not pool (configuration_tite.OUTPUT_POOLINGS)
_UNPOOLED_VECTOR = {"first": "no layer pools here: the first token's state", "mean": "no layer pools here: the mean "
                    "over the text's token states"}


def _describe(config: dict, converted: bool = False) -> tuple[str, list[str], list[str]]:
    """(architecture paragraph, tags, citations) for a config (``converted``: of a checkpoint ``convert`` wrote)."""
    model_type = config.get("model_type")
    architecture = (config.get("architectures") or ["?"])[0]
    if model_type == "tite":
        widths = config.get("hidden_sizes") or []
        kernels = config.get("kernel_sizes") or []
        pooled = sum(k is not None for k in kernels)
        text = (f"`{architecture}`: a TITE (Token-Independent Text Encoder) with {config.get('num_hidden_layers')} "
                f"layers that pools its hidden states inside {pooled} of them (kernel sizes {kernels}, strides "
                f"{config.get('strides')}, {config.get('pooling_location')} pooling) until one vector per text remains "
                f"at {config.get('max_position_embeddings')} tokens; widths {widths[0] if widths else '?'}"
                f"{' -> ' + str(widths[-1]) if widths and widths[-1] != widths[0] else ''}, "
                f"{config.get('position_embedding_type')} positions. `pooler_output` is the text's vector"
                + ("." if pooled else f" ({_UNPOOLED_VECTOR[config.get('output_pooling', 'first')]})."))
        return text, ["tite"], [TITE_BIBTEX]
    if model_type == "condenser":
        return condenser_description(config, converted=converted)
    if model_type == "infused_dual_encoder":
        source = config.get("infused_from")
        copied, new = config.get("num_copied_layers"), config.get("num_new_layers")
        origin = (f"its embeddings and first {copied} layer(s) copied from the cross-encoder "
                  f"`{source_reference(source)['name']}`" if source
                  else f"the shape of a cross-encoder's first {copied} layer(s), randomly initialised")
        text = (f"`{architecture}`: a {copied + new}-layer dual encoder (hidden size {config.get('hidden_size')}) with "
                f"{origin} and {new} new layer(s) on top; `pooler_output` is the {config.get('pooling')} over the "
                "text's tokens.")
        return text, ["cross-encoder-infused"], [CE_EMBEDDINGS_BIBTEX]
    text = (f"`{architecture}`: a {model_type} encoder ({config.get('num_hidden_layers')} layers, hidden size "
            f"{config.get('hidden_size')}) used as a dual encoder.")
    return text, [model_type] if model_type else [], []


def _recipe_facts(setup: dict, training_args: dict | None) -> list[str]:
    """The recipe a run was trained with and what its command line changed of it (or that it used none)."""
    name = setup.get("recipe")
    if not name:
        return ["- recipe: none (the package defaults, not a paper's settings; `dense-encoders recipes` lists "
                "the papers' recipes)"]
    try:
        recipe = load_recipe(name)
    except (ValueError, FileNotFoundError):
        return [f"- recipe: `{name}` (its file is not available here, so its settings are not compared)"]
    changed = recipe_differences(recipe, {**(training_args or {}), **setup})
    line = f"- recipe: `{recipe.name}`, the settings of *{recipe.paper}*"
    if changed:
        line += "; changed from it: " + ", ".join(f"{key} {actual} (recipe: {value})"
                                                 for key, (value, actual) in changed.items())
    else:
        line += ", none changed"
    return [line]


def _reference(record: dict, key: str) -> str | None:
    """How the card names the model of ``record[key]``: ``org/name`` at its revision, or a local folder by its
    name only (the record's ``sources``; a record written before them is named here, never by its path)."""
    value = record.get(key)
    if not isinstance(value, str) or not value:
        return None
    source = (record.get("sources") or {}).get(key) or source_reference(value)
    if not source.get("hub"):
        return f"`{source['name']}` (a local folder)"
    revision = source.get("revision")
    return f"`{source['name']}`" + (f" at revision `{revision[:12]}`" if revision else "")


def _hub_id(record: dict, key: str) -> str | None:
    """The Hub id of the model ``record[key]`` names, None when it is a local folder."""
    value = record.get(key)
    if not isinstance(value, str) or not value:
        return None
    source = (record.get("sources") or {}).get(key) or source_reference(value)
    return source["name"] if source.get("hub") else None


def _start_hub_id(records: dict) -> str | None:
    """The Hub id of the model a run started from (``records``: its setup records by file name): the checkpoint
    a pre-training continued or the backbone it or a warm start began with, or a distillation's student; None when
    that is a local folder or the run records none."""
    pretraining, warm_start = records.get(PRETRAINING_SETUP) or {}, records.get(WARM_START) or {}
    return (_hub_id(pretraining, "init_from") or _hub_id(pretraining, "backbone") or _hub_id(warm_start, "backbone")
            or _hub_id(records.get(DISTILLATION_SETUP) or {}, "student"))


def _base_model(records: RunRecords) -> str | None:
    """The card's ``base_model``: the Hub model this run started from, or, when it started from a local folder,
    the Hub model the nearest of that folder's earlier stages started from (a warm start from a Hub model
    saved locally, then distilled); None when no stage started from a Hub model (nothing is invented)."""
    own = {PRETRAINING_SETUP: records.pretraining, WARM_START: records.warm_start,
           DISTILLATION_SETUP: records.distillation}
    for stage_records in [own, *[stage.get("records") or {} for stage in reversed(records.earlier_stages)]]:
        if (hub_id := _start_hub_id(stage_records)) is not None:
            return hub_id
    return None


def _warm_start(record: dict) -> str:
    """A warm start (``warm_start.json``) in words: the class, its preset, the backbone it was built from."""
    preset = f" (preset `{record['preset']}`)" if record.get("preset") else ""
    return f"`{record.get('model_class')}`{preset} warm-started from {_reference(record, 'backbone')}"


def _name(value) -> str:
    """A data file or folder by its name only (a record written before names were recorded may hold a path)."""
    return Path(str(value)).name or str(value)


def _asked(record: dict, key: str, reason: str = "") -> str:
    """``record[key]`` (the value the run used) and, when it differs, the value asked for (``requested``)."""
    requested = (record.get("requested") or {}).get(key)
    if requested is None:
        return str(record[key])
    return f"{record[key]} ({requested} asked{'; ' + reason if reason else ''})"


def _documents_per_query(record: dict) -> str:
    """The documents per query a distillation used: the most any query got, the fewest when they differ, and
    the number asked for when the training file held fewer."""
    used, fewest = record["documents_per_query"], record.get("documents_per_query_min")
    text = f"{fewest} to {used}" if fewest is not None else str(used)
    requested = (record.get("requested") or {}).get("documents_per_query")
    if requested is not None:
        return f"{text} ({requested} asked; the training file holds {text} per query)"
    if fewest is not None:
        return f"{text} (the training file holds fewer than {used} for some queries)"
    return text


def _teacher(record: dict) -> str:
    """The teacher a distillation record names (``score-teacher``'s record of the training file)."""
    teacher = _reference(record, "teacher")
    if teacher is None:
        why = ("the training file has no `score-teacher` settings file" if "teacher" in record
               else "the run predates teacher records")
        return f"not recorded ({why}; the scores come from `{_name(record.get('train_file'))}`)"
    top_k = record.get("teacher_top_k")
    kind = record.get("teacher_kind") or "cross-encoder"  # score-teacher's records before bi-encoder teachers
    return f"the {kind} {teacher}" + (f", scoring the top {top_k} of a first-stage run" if top_k else "")


def _distillation_facts(record: dict, losses: list) -> list[str]:
    facts = [f"- distillation losses: `{record.get('losses')}` (teacher scores from "
             f"`{_name(record.get('train_file'))}`)"]
    facts += _loss_facts(losses)
    facts.append(f"- teacher: {_teacher(record)}")
    if (student := _reference(record, "student")) is not None:
        facts.append(f"- student initialised from: {student}")
    positions = record.get("student_positions")
    reason = f"the student has {positions} positions" if positions else ""
    for key, label in (("student_num_layers", "student layers kept"), ("documents_per_query", "documents per query"),
                       ("sampling", "document sampling"), ("query_max_length", "query length"),
                       ("document_max_length", "document length")):
        if record.get(key) is None:
            continue
        value = _documents_per_query(record) if key == "documents_per_query" else _asked(
            record, key, reason if key.endswith("max_length") else "")
        facts.append(f"- {label}: {value}")
    return facts


def _pretraining_facts(record: dict) -> list[str]:
    facts = [f"- pre-training: {record.get('architecture')} objective"]
    for key, label in (("backbone", "warm start"), ("init_from", "continued from")):
        if (named := _reference(record, key)) is not None:
            facts.append(f"- {label}: {named}")
    for key, label in (("preset", "preset"), ("corpus", "corpus"), ("max_seq_length", "sequence length"),
                       ("mlm_probability", "masking rate")):
        if record.get(key) is not None:
            facts.append(f"- {label}: " + (f"`{_name(record[key])}`" if key == "corpus" else str(record[key])))
    return facts


def _infusion_origin(record: dict) -> str:
    """What an infused dual encoder was built from: the cross-encoder's weights (DE-N-CE), or its shape only."""
    cross_encoder = _reference(record, "cross_encoder")
    if record.get("random_init") or str(record.get("model", "")).endswith("-Rand"):
        return f"a dual encoder of the shape of the cross-encoder {cross_encoder}'s first layers, randomly initialised,"
    return f"a dual encoder built from the cross-encoder {cross_encoder}"


def _infusion_facts(record: dict) -> list[str]:
    facts = [f"- {record.get('model')}: {_infusion_origin(record)} and trained with `{record.get('method')}` on "
             f"`{_name(record.get('train_data'))}`"]
    for key, label in (("epochs", "epochs"), ("batch_size", "batch size"), ("learning_rate", "learning rate"),
                       ("warmup_steps", "warm-up"), ("max_length", "token limit"),
                       ("candidates", "BM25 candidates per query")):
        if record.get(key) is not None:
            facts.append(f"- {label}: {record[key]}")
    return facts


def _training(records: RunRecords) -> tuple[list[str], list[str]]:
    """(facts, extra citations) from a run's training records."""
    facts, citations = [], []
    pretraining, distillation, infusion = records.pretraining, records.distillation, records.infusion
    if records.warm_start:
        facts.append(f"- {_warm_start(records.warm_start)}, not trained since")
    training_args = records.training_args
    if infusion:
        facts += _infusion_facts(infusion)
        facts += _recipe_facts(infusion, None)
    elif pretraining or distillation:
        facts += _recipe_facts(distillation or pretraining, training_args)
    if pretraining:
        facts += _pretraining_facts(pretraining)
        citations += _pretraining_citations(pretraining)
    if distillation:
        facts += _distillation_facts(distillation, records.distillation_losses)
        citations.append(DISTILLATION_BIBTEX)
        facts += _positive_set_facts(records)
    if infusion:
        citations.append(CE_EMBEDDINGS_BIBTEX)
    state = records.trainer_state
    if state:
        facts.append(f"- optimizer steps: {state.get('global_step')}, "
                     f"epochs: {round(float(state.get('epoch') or 0), 2)}")
        if state.get("train_batch_size"):
            facts.append(f"- batch size per device: {state['train_batch_size']}")
        logged = [entry for entry in state.get("log_history", []) if "loss" in entry]
        if logged:
            last = logged[-1]
            parts = [f"{key} {value:.4g}" for key, value in last.items()
                     if key.endswith("loss") and isinstance(value, (int, float))]
            facts.append(f"- last logged losses (step {last.get('step')}): " + ", ".join(parts))
            if "learning_rate" in last:
                facts.append(f"- learning rate at that step: {last['learning_rate']:.3g}")
    environment = records.training_environment
    if environment:
        facts.append("- hardware: " + ", ".join(f"{k} {v}" for k, v in environment.items()))
    return facts, citations


def _pretraining_citations(record: dict) -> list[str]:
    return {"condenser": [CONDENSER_BIBTEX], "cocondenser": [CONDENSER_BIBTEX, COCONDENSER_BIBTEX],
            "tite": [TITE_BIBTEX]}.get(record.get("architecture"), [])


def _stage_line(stage: dict) -> tuple[str, list[str]]:
    """One earlier stage (``earlier_stages.json``) in a sentence, and the papers it follows."""
    records = stage.get("records") or {}
    parts, citations = [], []
    if conversion := records.get(CONVERSION):
        revision = conversion.get("source_revision")
        origin = (f"`{conversion.get('source')}` at revision `{revision}`" if revision
                  else f"a local folder named `{_name(conversion.get('source'))}`")
        parts.append(f"converted by `dense-encoders convert` from {origin}, a checkpoint of "
                     f"{conversion.get('source_description')}")
    if warm_start := records.get(WARM_START):
        parts.append(_warm_start(warm_start))
    if pretraining := records.get(PRETRAINING_SETUP):
        text = f"pre-training with the {pretraining.get('architecture')} objective"
        if (start := _reference(pretraining, "init_from")) is not None:
            text += f", continued from {start}"
        elif (start := _reference(pretraining, "backbone")) is not None:
            text += f", warm-started from {start}"
        elif pretraining.get("preset"):
            text += f", from the preset `{pretraining['preset']}`"
        if pretraining.get("corpus"):
            text += f", on `{_name(pretraining['corpus'])}`"
        text += (f", sequence length {pretraining.get('max_seq_length')}, masking rate "
                 f"{pretraining.get('mlm_probability')}")
        parts.append(text)
        citations += _pretraining_citations(pretraining)
    if infusion := records.get(INFUSION_SETUP):
        parts.append(f"{infusion.get('model')}, {_infusion_origin(infusion)} trained with `{infusion.get('method')}` "
                     f"on `{_name(infusion.get('train_data'))}`")
        citations.append(CE_EMBEDDINGS_BIBTEX)
    if distillation := records.get(DISTILLATION_SETUP):
        text = (f"distillation with the losses `{distillation.get('losses')}` of teacher scores from "
                f"`{_name(distillation.get('train_file'))}` (teacher: {_teacher(distillation)})")
        if (student := _reference(distillation, "student")) is not None:
            text += f", student initialised from {student}"
        text += (f", documents per query {_documents_per_query(distillation)}, document length "
                 f"{_asked(distillation, 'document_max_length')}")
        parts.append(text)
        citations.append(DISTILLATION_BIBTEX)
    steps = stage.get("optimizer_steps")
    line = f"`{stage.get('model')}`: " + "; then ".join(parts) + (f"; {steps} optimizer steps" if steps is not None
                                                                  else "")
    return line, citations


def _earlier_stages(stages: list) -> tuple[list[str], list[str]]:
    """The card's section on the stages before this run (``earlier_stages.json``), and their citations."""
    if not stages:
        return [], []
    lines = ["## Earlier stages", "", "The model this run started from was made in these stages, oldest first "
             "(their records, copied when this run was trained):", ""]
    citations = []
    for number, stage in enumerate(stages, start=1):
        line, cited = _stage_line(stage)
        lines.append(f"{number}. {line}")
        citations += cited
    return lines + [""], citations


def _loss_facts(losses: list) -> list[str]:
    """One line per distillation loss (its display name, weight, options, equation and paper) from
    ``distillation_losses.json``, which the trainer writes from the losses themselves."""
    lines = []
    for loss in losses:
        options = ", ".join(f"{key} {value}" for key, value in (loss.get("options") or {}).items())
        lines.append(f"  - {loss.get('display_name', loss.get('name'))} (weight {loss.get('weight', 1):g}"
                     f"{'; ' + options if options else ''}): `{loss.get('equation')}`; {loss.get('citation')}")
    return lines


def _positive_set_facts(records: RunRecords) -> list[str]:
    """Which P the losses that read a positive set (M3SE / RankDistil-B) used, from ``distillation_positives.json``
    (nothing when the folder does not record it or no configured loss takes a positive set); the losses are
    named by their display names in ``distillation_losses.json``."""
    recorded = records.distillation_positives
    if not recorded or not recorded.get("losses"):
        return []
    names = {loss["name"]: loss["display_name"] for loss in records.distillation_losses
             if "name" in loss and "display_name" in loss}
    label = "P (" + " / ".join(names.get(name, name) for name in recorded["losses"]) + ")"
    if not recorded.get("source"):
        return [f"- {label}: the teacher's best document (no relevance labels)"]
    labelled, total = recorded.get("labelled_queries", 0), recorded.get("queries", 0)
    return [f"- {label}: judged positives from {recorded['source']} (relevance >= {recorded.get('relevance_level')}) "
            f"for {labelled:,} of {total:,} queries; the teacher's best document for the other {total - labelled:,}"]


def _conversion(record: dict | None) -> list[str]:
    """The card's lines about a folder ``dense-encoders convert`` wrote from another implementation's checkpoint
    (``record``: its ``conversion.json``)."""
    if record is None:
        return []
    revision = record.get("source_revision")
    origin = (f"the Hub repository `{record.get('source')}` at revision `{revision}`" if revision
              else f"a local folder named `{record.get('source')}`")
    lines = ["## Conversion", "", f"Converted from {origin}, a checkpoint of "
             f"{record.get('source_description')}, by `dense-encoders convert` ({record.get('converted_at')}); the "
             "conversion is exact (every tensor mapped, nothing initialised at random).", ""]
    facts = {key: value for key, value in record.items()
             if key not in ("source", "source_revision", "source_description", "converted_at", "source_format")
             and value not in (None, [], {})}
    lines += [f"- {key.replace('_', ' ')}: {value}" for key, value in facts.items()]
    return lines + [""]


def _search(result: dict) -> str:
    """How a result's documents were searched: exact or FAISS, over embeddings encoded in the run (float32) or
    stored shards (their dtype), and the runtime that encoded them when it was not torch."""
    settings = result.get("settings") or {}
    # the label the backend gave the results JSON (evaluation's backend registry); a record without one: its name
    text = settings.get("search_backend_label") or settings.get("search_backend", "exact")
    if settings.get("corpus_embeddings"):
        text += f", {settings.get('corpus_embeddings_dtype') or 'stored'} shards"
    runtime = settings.get("runtime") or {}
    if runtime.get("name", "torch") != "torch":
        text += f", encoded in {runtime['name']} {runtime.get('version', '')}".rstrip()
    return text


def _infusion_report(records: RunRecords) -> tuple[dict | None, dict | None]:
    """(the ``report.json`` of ``dense-encoders infuse`` in the run's records, this model's row of it), or
    (None, None) when there is none or the report has no row of the model its ``infusion_setup.json`` names."""
    report, setup = records.infusion_report, records.infusion
    if not isinstance(report, dict) or not setup or not isinstance(report.get("rows"), list):
        return None, None
    row = next((row for row in report["rows"] if row.get("model") == setup.get("model")), None)
    return (report, row) if row is not None else (None, None)


def _report_lines(report: dict, model: str) -> list[str]:
    """The card's section on the retrieve + rerank report of ``dense-encoders infuse``."""
    graded = f" (graded pairs, relevant from {report['pair_threshold']})" if report.get("pair_threshold") else ""
    lines = ["## Retrieve and rerank", "",
             f"The `dense-encoders infuse` report on {report.get('dataset')} ({report.get('split')}){graded}: each "
             f"dual encoder retrieves, the cross-encoder `{source_reference(report.get('cross_encoder'))['name']}` "
             f"re-ranks its top {report.get('top_k')}; encode speeds measured side by side in the same run (speed-up "
             f"relative to {report.get('baseline')}).", "",
             "| model | Hits@10 | MRR@10 | Hits@10 +rerank | MRR@10 +rerank | documents/s | speed-up |",
             "|:--|--:|--:|--:|--:|--:|--:|"]
    for row in report["rows"]:
        label = f"{row['model']} (this model)" if row["model"] == model else (  # the command's baseline: named
            f"{row['model']} (`{source_reference(row['path'])['name']}`)" if row["model"] == "baseline DE"
            and row.get("path") else row["model"])
        lines.append(f"| {label} | {row['retrieve']['hits@10']:.4f} | {row['retrieve']['mrr@10']:.4f} | "
                     f"{row['rerank']['hits@10']:.4f} | {row['rerank']['mrr@10']:.4f} | "
                     f"{row['documents_per_s']:.1f} | {row['speedup']:.2f}x |")
    return lines + [""]


def _usage_by_side(repo: str, similarity: str, normalised: bool, prompts: dict[str, str],
                   lengths: dict[str, int], max_positions: int | None = None) -> str:
    """Usage for a model whose queries and documents are encoded differently (a prompt in front, a token limit
    per side, as a converted Lightning IR bi-encoder): the tokenizer call with the prompt and the length, and
    ``encode_query`` / ``encode_document``, which apply both. A side without a length is cut at the model's
    ``max_positions`` (as sentence-transformers cuts it; ``None``: at the tokenizer's ``model_max_length``), never
    left whole: a longer text has no positions (and a TITE no one vector)."""
    normalise = "\n    return torch.nn.functional.normalize(vectors, dim=-1)" if normalised else "\n    return vectors"
    if similarity == "cosine" and not normalised:
        scores = ("torch.nn.functional.normalize(query_embeddings, dim=-1) @ "
                  "torch.nn.functional.normalize(document_embeddings, dim=-1).T  # cosine similarity")
    else:
        scores = f"query_embeddings @ document_embeddings.T  # {similarity} similarity"
    texts = ('queries = ["what is dense retrieval?"]\n'
             'documents = ["Dense retrieval encodes queries and documents as vectors."]\n')

    limits = {side: lengths.get(side, max_positions) for side in ("query", "document")}

    def call(side: str, texts_name: str) -> str:
        return f"encode({texts_name}, {json.dumps(prompts.get(side, ''))}, {limits[side]})"

    plural = {"query": "queries", "document": "documents"}
    said = [f"{plural[side]} start with `{prompts[side]}`" for side in plural if side in prompts]
    said += [f"{plural[side]} are cut at {limits[side]} tokens" + ("" if side in lengths else ", the model's positions")
             for side in plural if limits[side] is not None]
    return f"""Queries and documents are encoded differently ({"; ".join(said)}, prompt included): use
`encode_query` / `encode_document`, or give the tokenizer the prompt and the length.

```python
import torch
from transformers import AutoModel, AutoTokenizer

{texts}tokenizer = AutoTokenizer.from_pretrained("{repo}", trust_remote_code=True)
model = AutoModel.from_pretrained("{repo}", trust_remote_code=True)


def encode(texts, prompt, max_length):
    batch = tokenizer([prompt + text for text in texts], padding=True, truncation=True, max_length=max_length,
                      return_tensors="pt")
    with torch.no_grad():
        vectors = model(**batch).pooler_output{normalise}


query_embeddings = {call("query", "queries")}
document_embeddings = {call("document", "documents")}
scores = {scores}
```

```python
from sentence_transformers import SentenceTransformer

{texts}model = SentenceTransformer("{repo}", trust_remote_code=True)
query_embeddings = model.encode_query(queries)
document_embeddings = model.encode_document(documents)
scores = model.similarity(query_embeddings, document_embeddings)  # {similarity} similarity
```"""


def _usage(repo: str, model_type: str | None, pooling: str | None, similarity: str | None, normalised: bool,
           prompts: dict[str, str] | None = None, lengths: dict[str, int] | None = None,
           max_positions: int | None = None) -> str:
    similarity = similarity or "cosine"
    if prompts or lengths:
        return _usage_by_side(repo, similarity, normalised, prompts or {}, lengths or {}, max_positions)
    ours = model_type in OUR_MODEL_TYPES
    if ours:
        vector = "model(**batch).pooler_output"
    elif pooling == "mean":
        vector = ("(lambda s, m: (s * m[..., None]).sum(1) / m.sum(1, keepdim=True))"
                  "(model(**batch).last_hidden_state, batch['attention_mask'])")
    else:
        vector = "model(**batch).last_hidden_state[:, 0]"
    normalise = "\nembeddings = torch.nn.functional.normalize(embeddings, dim=-1)" if normalised else ""
    return f"""```python
import torch
from transformers import AutoModel, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("{repo}", trust_remote_code=True)
model = AutoModel.from_pretrained("{repo}", trust_remote_code=True)
batch = tokenizer(["what is dense retrieval?"], padding=True, truncation=True, return_tensors="pt")
with torch.no_grad():
    embeddings = {vector}{normalise}
```

```python
from sentence_transformers import SentenceTransformer

model = SentenceTransformer("{repo}", trust_remote_code=True)
embeddings = model.encode(["what is dense retrieval?"])  # compare with {similarity} similarity
```"""


def _backend_lines(repo: str, backends: list[str]) -> list[str]:
    """How to load the ONNX / OpenVINO files the folder ships (``dense-encoders export``), OpenVINO with the float32
    precision hint its file was exported in (its default precision moves the vectors by up to 3e-2 on CPUs with
    bfloat16); nothing without them."""
    if not backends:
        return []
    options = {"onnx": "", "openvino": ',\n    model_kwargs={"ov_config": {"INFERENCE_PRECISION_HINT": "f32"}}'}
    loads = [f'model = SentenceTransformer("{repo}", backend="{backend}", trust_remote_code=True{options[backend]})'
             for backend in backends]
    names = " and ".join("ONNX" if backend == "onnx" else "OpenVINO" for backend in backends)
    files = ", ".join(f"`{backend}/`" for backend in backends)
    return [f"The repository also holds the transformer exported for sentence-transformers' {names} backends "
            f"({files}, float32; they need optimum: `optimum-onnx[onnxruntime]`, `optimum-intel[openvino]`):", "",
            "```python", "from sentence_transformers import SentenceTransformer", "", *loads, "```", ""]


def _serving_lines(similarity: str | None, normalised: bool) -> list[str]:
    """What a serving stack that L2-normalises every vector (infinity-emb) changes: the scores of a model compared
    by a similarity other than cosine whose vectors are not unit vectors already; nothing for the others."""
    if (similarity or "cosine") == "cosine" or normalised:
        return []
    measure = SIMILARITY_WORDS.get(similarity, f"{similarity} similarity")
    return [f"This model's vectors are compared by {measure} and their lengths count: a serving stack that always "
            "L2-normalises the vectors (infinity-emb does) drops their magnitudes, so its scores are cosine "
            f"similarities, not the model's {measure}.", ""]


def _dataset_cell(dataset: dict) -> str:
    """A results row's dataset: its name, or for a Hub dataset its id at the commit read (and, for BEIR's layout,
    the commit of its companion qrels)."""
    hub = dataset.get("hub")
    if not hub:
        return dataset["name"]
    qrels = hub.get("qrels")
    companion = f", qrels `{qrels['repo_id']}` at `{qrels['revision'][:12]}`" if qrels else ""
    return f"`{hub['repo_id']}` at revision `{hub['revision'][:12]}`{companion}"


def model_card(
    folder: str | Path,
    repo_id: str | None = None,
    *,
    results: list | None = None,
    license: str | None = None,
    base_model: str | None = None,
) -> ModelCard:
    """The card of a checkpoint folder (any family): :func:`render_card` of the folder's
    :class:`~dense_encoders.hub.card_data.DenseEncoderCardData` (``results``: evaluation results to report besides
    the folder's own)."""
    return render_card(DenseEncoderCardData.from_folder(folder, repo_id, results=results, license=license,
                                                        base_model=base_model))


def condenser_model_card(folder: str | Path, repo_id: str | None = None, license: str | None = None) -> ModelCard:
    """:func:`model_card` of a Condenser / coCondenser checkpoint folder; a ValueError for another architecture."""
    data = DenseEncoderCardData.from_folder(folder, repo_id, license=license)
    condenser_description(data.config)  # raises for other architectures
    return render_card(data)


def _eval_results(evaluations: list[dict], report: dict | None, report_row: dict | None) -> list[EvalResult]:
    """The card metadata's ``eval_results``: every reported metric of the results JSONs, and of this model's row of
    the ``dense-encoders infuse`` report."""
    eval_results = []
    for result in evaluations:
        dataset, hub = result["dataset"], result["dataset"].get("hub") or {}
        for key, value in result["metrics"].items():
            if key in RESULT_METRICS:
                metric_type, metric_name = RESULT_METRICS[key]
                eval_results.append(EvalResult(
                    task_type="retrieval", task_name="Retrieval", dataset_type=hub.get("repo_id", dataset["name"]),
                    dataset_name=hub.get("repo_id", dataset["name"]), dataset_split=dataset["split"],
                    dataset_revision=hub.get("revision"), metric_type=metric_type,
                    metric_value=round(float(value), 4), metric_name=metric_name,
                ))
    if report_row is not None:
        for key, value in report_row["retrieve"].items():
            if key in RESULT_METRICS:
                metric_type, metric_name = RESULT_METRICS[key]
                eval_results.append(EvalResult(
                    task_type="retrieval", task_name="Retrieval", dataset_type=report["dataset"],
                    dataset_name=report["dataset"], dataset_split=report["split"], metric_type=metric_type,
                    metric_value=round(float(value), 4), metric_name=metric_name,
                ))
    return eval_results


def _results_lines(evaluations: list[dict]) -> list[str]:
    """The card's results table: a row per results JSON (its metrics, how it was searched, encode speed)."""
    if not evaluations:
        return []
    lines = ["## Results", "", "| dataset | split | " + " | ".join(RESULT_METRICS[k][1] for k in RESULT_METRICS)
             + " | search | documents/s |", "|:--|:--|" + "--:|" * len(RESULT_METRICS) + ":--|--:|"]
    levels = sorted({r.get("settings", {}).get("relevance_level", 1) for r in evaluations})
    for result in evaluations:
        cells = [f"{result['metrics'][k]:.4f}" if k in result["metrics"] else "-" for k in RESULT_METRICS]
        speed = result.get("throughput", {}).get("documents_per_s")
        device = result.get("environment", {}).get("device", "")
        level = result.get("settings", {}).get("relevance_level", 1)
        split = result["dataset"]["split"] + (f" (relevance level {level})" if len(levels) > 1 else "")
        lines.append(f"| {_dataset_cell(result['dataset'])} | {split} | " + " | ".join(cells)
                     + f" | {_search(result)} | {f'{speed:.1f} ({device})' if speed else '-'} |")
    return lines + ["", "Measured with `dense-encoders evaluate` and ir-measures; the search column says how the "
                    "documents were searched (exact: every document scored with float32 embeddings encoded in the "
                    "run; FAISS IndexFlatIP: FAISS's exact inner-product index; shards: the stored document "
                    "embeddings of `dense-encoders encode`, in the dtype named); relevance level "
                    f"{', '.join(map(str, levels))}: MRR, Recall and Hits count a judgement of at least that grade "
                    "as relevant, nDCG uses the graded judgements.", ""]


def _limitation_lines(config: dict, records: RunRecords, evaluated: bool) -> list[str]:
    """The card's limitations: a TITE's length, no results recorded (``evaluated`` False), pre-training only."""
    limitations = []
    if config.get("model_type") == "tite":
        limitations.append(f"Texts longer than {config.get('max_position_embeddings')} tokens must be truncated: "
                           "the pooling schedule reaches one vector only up to that length.")
    if not evaluated:
        limitations.append("No evaluation results were recorded with this checkpoint.")
    if pretraining := records.pretraining:
        limitations.append(f"Pre-trained with the {pretraining.get('architecture')} objective only: fine-tune it on "
                           "relevance data before using it for retrieval.")
    return ["## Limitations", "", *[f"- {item}" for item in limitations], ""] if limitations else []


def _citation_lines(citations: list[str]) -> list[str]:
    """The card's BibTeX section, each citation once, in order."""
    unique = list(dict.fromkeys(citations))
    return ["## Citation", "", "```bibtex", "\n\n".join(unique), "```", ""] if unique else []


def render_card(data: DenseEncoderCardData) -> ModelCard:
    """The card that ``data`` describes: metadata, architecture, training, results, usage."""
    config, records, name = data.config, data.records, data.model_name
    description, tags, citations = _describe(config, converted=records.conversion is not None)
    facts, training_citations = _training(records)
    stage_lines, stage_citations = _earlier_stages(records.earlier_stages)
    pooling, similarity, normalised = data.pooling, data.similarity, data.normalized
    evaluations = [result for _, result in records.evaluations]
    report, report_row = _infusion_report(records)
    sentence_transformers = pooling is not None  # the folder is a sentence-transformers model
    metadata = ModelCardData(  # no `datasets:`: that list names training data, and evaluation data are in eval_results
        model_name=name,
        library_name="sentence-transformers" if sentence_transformers else "transformers",
        # sentence-transformers' own cards: its task and tags, so the Hub lists the model with the embedding models
        pipeline_tag="sentence-similarity" if sentence_transformers else "feature-extraction",
        tags=[*tags, "dense-encoders", *(SENTENCE_TRANSFORMERS_TAGS if sentence_transformers else
                                         ["feature-extraction"]), "dense-retrieval"],
        base_model=data.base_model or _base_model(records),
        license=data.license,
        eval_results=_eval_results(evaluations, report, report_row) or None,
    )
    lines = [f"# {name}", "", description, "", *_conversion(records.conversion)]
    if similarity or pooling:
        lines += [f"Sentence-transformers configuration: {pooling or 'model'} pooling, {similarity or 'cosine'} "
                  "similarity.", ""]
    lines += stage_lines
    if facts:
        lines += ["## Training", "", *facts, ""]
    lines += _results_lines(evaluations)
    if report is not None:
        lines += _report_lines(report, report_row["model"])
    lines += ["## Usage", "", _usage(name, config.get("model_type"), pooling, similarity, normalised,
                                     data.prompts, data.lengths, config.get("max_position_embeddings")), "",
              *_backend_lines(name, data.backends), *_serving_lines(similarity, normalised)]
    lines += _limitation_lines(config, records, evaluated=bool(evaluations) or report is not None)
    lines += _citation_lines(citations + stage_citations + training_citations)
    return ModelCard(f"---\n{metadata.to_yaml()}\n---\n\n" + "\n".join(lines))


__all__ = ["CE_EMBEDDINGS_BIBTEX", "DISTILLATION_BIBTEX", "TITE_BIBTEX",
           "DenseEncoderCardData", "condenser_model_card", "model_card", "render_card"]
