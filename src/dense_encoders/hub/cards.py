"""Model cards for every model family, generated from what the checkpoint folder records.

Built with huggingface_hub's ``ModelCard`` / ``ModelCardData``. The folder's ``config.json`` says
what the architecture is; ``trainer_state.json``, ``pretraining_setup.json`` /
``distillation_setup.json`` (with ``distillation_losses.json`` / ``distillation_positives.json``) /
``infusion_setup.json`` (with the recipe, if any) and ``training_environment.json``
say how it was trained; results JSONs
of the evaluation harness (passed in, or under ``<folder>/evaluation/``) say how well it does.
Whatever the folder does not record is left out, never invented.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..checkpoints.folder import OUR_MODEL_TYPES, missing_sentence_transformers_files, read_pipeline
from ..data.files import read_json
from ..recipes import load_recipe, recipe_differences
from .condenser_card import condenser_description

TITE_BIBTEX = """@inproceedings{schlatt-2025-tite,
  title = {TITE: Token-Independent Text Encoder for Information Retrieval},
  author = {Schlatt, Ferdinand and Hagen, Tim and Potthast, Martin and Hagen, Matthias},
  booktitle = {Proceedings of the 48th International ACM SIGIR Conference on Research and Development in Information Retrieval},
  year = {2025},
  doi = {10.1145/3726302.3730094}
}"""

CE_EMBEDDINGS_BIBTEX = """@misc{ce-sentence-embeddings,
  title = {Can Cross Encoders Produce Useful Sentence Embeddings?}
}"""

DISTILLATION_BIBTEX = """@inproceedings{menon-2022-defense,
  title = {In Defense of Dual-Encoders for Neural Ranking},
  author = {Menon, Aditya and Jayasumana, Sadeep and Rawat, Ankit Singh and Kim, Seungyeon and Reddi, Sashank and Kumar, Sanjiv},
  booktitle = {Proceedings of the 39th International Conference on Machine Learning},
  year = {2022}
}"""

# the records of a run the card is generated from (the trainers and `convert` write them next to the model)
RECORD_FILES = ("conversion.json", "trainer_state.json", "training_args.json", "training_environment.json",
                "pretraining_setup.json", "distillation_setup.json", "distillation_losses.json",
                "distillation_positives.json", "infusion_setup.json")

RESULT_METRICS = {"ndcg@10": ("ndcg_at_10", "nDCG@10"), "mrr@10": ("mrr_at_10", "MRR@10"),
                  "recall@100": ("recall_at_100", "Recall@100"), "recall@1000": ("recall_at_1000", "Recall@1000"),
                  "hits@10": ("accuracy_at_10", "Hits@10")}


def _st_settings(folder: Path) -> tuple[str | None, str | None, bool]:
    """(pooling, similarity, normalised) from the folder's sentence-transformers files."""
    declared = read_pipeline(folder)
    if not declared and (missing := missing_sentence_transformers_files(folder)):  # a push adds these
        with tempfile.TemporaryDirectory() as scratch:
            for relative, text in missing.items():
                (Path(scratch) / relative).parent.mkdir(parents=True, exist_ok=True)
                (Path(scratch) / relative).write_text(text, encoding="utf-8")
            declared = read_pipeline(scratch)
    return declared.get("pooling"), declared.get("similarity"), declared.get("normalize", False)


# the vector of a TITE whose layers do not pool (configuration_tite.OUTPUT_POOLINGS)
_UNPOOLED_VECTOR = {"first": "no layer pools here: the first token's state", "mean": "no layer pools here: the mean "
                    "over the text's token states"}


def _describe(config: dict) -> tuple[str, list[str], list[str]]:
    """(architecture paragraph, tags, citations) for a config."""
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
        return condenser_description(config)
    if model_type == "infused_dual_encoder":
        source = config.get("infused_from")
        copied, new = config.get("num_copied_layers"), config.get("num_new_layers")
        origin = (f"its embeddings and first {copied} layer(s) copied from the cross-encoder `{source}`"
                  if source else f"the shape of a cross-encoder's first {copied} layer(s), randomly initialised")
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


def _training(folder: Path) -> tuple[list[str], list[str], str | None, list[str]]:
    """(facts, extra citations, base model, datasets) from the training records in ``folder``."""
    facts, citations, base_model, datasets = [], [], None, []
    pretraining = read_json(folder / "pretraining_setup.json")
    distillation = read_json(folder / "distillation_setup.json")
    infusion = read_json(folder / "infusion_setup.json")
    training_args = read_json(folder / "training_args.json")
    if infusion:
        facts.append(f"- {infusion.get('model')}: a dual encoder built from the cross-encoder "
                     f"`{infusion.get('cross_encoder')}` and trained with `{infusion.get('method')}` on "
                     f"`{Path(str(infusion.get('train_data'))).name}`")
        for key, label in (("epochs", "epochs"), ("batch_size", "batch size"), ("learning_rate", "learning rate"),
                           ("warmup_steps", "warm-up"), ("max_length", "token limit")):
            if infusion.get(key) is not None:
                facts.append(f"- {label}: {infusion[key]}")
        facts += _recipe_facts(infusion, None)
    elif pretraining or distillation:
        facts += _recipe_facts(distillation or pretraining, training_args)
    if pretraining:
        facts.append(f"- pre-training: {pretraining.get('architecture')} objective")
        for key, label in (("backbone", "warm start"), ("init_from", "continued from"), ("preset", "preset"),
                           ("corpus", "corpus"), ("max_seq_length", "sequence length"),
                           ("mlm_probability", "masking rate")):
            if pretraining.get(key) is not None:
                facts.append(f"- {label}: {pretraining[key]}")
        base_model = pretraining.get("backbone") or pretraining.get("init_from")
    if distillation:
        facts.append(f"- distillation losses: `{distillation.get('losses')}` (teacher scores from "
                     f"`{Path(str(distillation.get('train_file'))).name}`)")
        facts += _loss_facts(folder)
        for key, label in (("student", "student initialised from"), ("student_num_layers", "student layers kept"),
                           ("documents_per_query", "documents per query"), ("sampling", "document sampling"),
                           ("query_max_length", "query length"), ("document_max_length", "document length")):
            if distillation.get(key) is not None:
                facts.append(f"- {label}: {distillation[key]}")
        base_model = base_model or distillation.get("student")
        citations.append(DISTILLATION_BIBTEX)
        facts += _positive_set_facts(folder)
    state = read_json(folder / "trainer_state.json")
    if state:
        facts.append(f"- optimizer steps: {state.get('global_step')}, epochs: {round(float(state.get('epoch') or 0), 2)}")
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
    environment = read_json(folder / "training_environment.json")
    if environment:
        facts.append("- hardware: " + ", ".join(f"{k} {v}" for k, v in environment.items()))
    if base_model and Path(str(base_model)).exists():
        base_model = None  # a local path means nothing on the Hub
    return facts, citations, base_model, datasets


def _loss_facts(folder: Path) -> list[str]:
    """One line per distillation loss (its display name, weight, options, equation and paper) from
    ``distillation_losses.json``, which the trainer writes from the losses themselves."""
    lines = []
    for loss in read_json(folder / "distillation_losses.json") or []:
        options = ", ".join(f"{key} {value}" for key, value in (loss.get("options") or {}).items())
        lines.append(f"  - {loss.get('display_name', loss.get('name'))} (weight {loss.get('weight', 1):g}"
                     f"{'; ' + options if options else ''}): `{loss.get('equation')}`; {loss.get('citation')}")
    return lines


def _positive_set_facts(folder: Path) -> list[str]:
    """Which P the losses that read a positive set (M3SE / RankDistil-B) used, from ``distillation_positives.json``
    (nothing when the folder does not record it or no configured loss takes a positive set); the losses are
    named by their display names in ``distillation_losses.json``."""
    recorded = read_json(folder / "distillation_positives.json")
    if not recorded or not recorded.get("losses"):
        return []
    names = {loss["name"]: loss["display_name"] for loss in read_json(folder / "distillation_losses.json") or []
             if "name" in loss and "display_name" in loss}
    label = "P (" + " / ".join(names.get(name, name) for name in recorded["losses"]) + ")"
    if not recorded.get("source"):
        return [f"- {label}: the teacher's best document (no relevance labels)"]
    labelled, total = recorded.get("labelled_queries", 0), recorded.get("queries", 0)
    return [f"- {label}: judged positives from {recorded['source']} (relevance >= {recorded.get('relevance_level')}) "
            f"for {labelled:,} of {total:,} queries; the teacher's best document for the other {total - labelled:,}"]


def _conversion(folder: Path) -> list[str]:
    """The card's lines about a folder ``dense-encoders convert`` wrote from another implementation's checkpoint."""
    record = read_json(folder / "conversion.json")
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


def _results(folder: Path, results: list) -> list[dict]:
    loaded = []
    for item in list(results or []) + sorted((folder / "evaluation").glob("*.json")):
        data = item if isinstance(item, dict) else json.loads(Path(item).read_text())
        if data.get("format", "").startswith("dense-encoders/retrieval-results"):
            loaded.append(data)
    return loaded


def _sides(folder: Path) -> tuple[dict[str, str], dict[str, int]]:
    """(prompts, lengths) that ``encode_query`` / ``encode_document`` apply: the non-empty ``query`` / ``document``
    prompts and the ``query_length`` / ``document_length`` token limits of the sentence-transformers files."""
    prompts = {side: text for side, text in (read_pipeline(folder).get("prompts") or {}).items()
               if side in ("query", "document") and text}
    settings = read_json(folder / "sentence_bert_config.json") or {}
    lengths = {side: int(settings[f"{side}_length"]) for side in ("query", "document") if settings.get(f"{side}_length")}
    return prompts, lengths


def _usage_by_side(repo: str, similarity: str, normalised: bool, prompts: dict[str, str],
                   lengths: dict[str, int]) -> str:
    """Usage for a model whose queries and documents are encoded differently (a prompt in front, a token limit
    per side, as a converted Lightning IR bi-encoder): the tokenizer call with the prompt and the length, and
    ``encode_query`` / ``encode_document``, which apply both."""
    normalise = "\n    return torch.nn.functional.normalize(vectors, dim=-1)" if normalised else "\n    return vectors"
    if similarity == "cosine" and not normalised:
        scores = ("torch.nn.functional.normalize(query_embeddings, dim=-1) @ "
                  "torch.nn.functional.normalize(document_embeddings, dim=-1).T  # cosine similarity")
    else:
        scores = f"query_embeddings @ document_embeddings.T  # {similarity} similarity"
    texts = ('queries = ["what is dense retrieval?"]\n'
             'documents = ["Dense retrieval encodes queries and documents as vectors."]\n')

    def call(side: str, texts_name: str) -> str:
        limit = f", {lengths[side]}" if side in lengths else ", None"
        return f"encode({texts_name}, {json.dumps(prompts.get(side, ''))}{limit})"

    plural = {"query": "queries", "document": "documents"}
    said = [f"{plural[side]} start with `{prompts[side]}`" for side in plural if side in prompts]
    said += [f"{plural[side]} are cut at {lengths[side]} tokens" for side in plural if side in lengths]
    return f"""Queries and documents are encoded differently ({"; ".join(said)}, prompt included): use
`encode_query` / `encode_document`, or give the tokenizer the prompt and the length.

```python
import torch
from transformers import AutoModel, AutoTokenizer

{texts}tokenizer = AutoTokenizer.from_pretrained("{repo}", trust_remote_code=True)
model = AutoModel.from_pretrained("{repo}", trust_remote_code=True)


def encode(texts, prompt, max_length):
    batch = tokenizer([prompt + text for text in texts], padding=True, truncation=max_length is not None,
                      max_length=max_length, return_tensors="pt")
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
           prompts: dict[str, str] | None = None, lengths: dict[str, int] | None = None) -> str:
    similarity = similarity or "cosine"
    if prompts or lengths:
        return _usage_by_side(repo, similarity, normalised, prompts or {}, lengths or {})
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


def model_card(
    folder: str | Path,
    repo_id: str | None = None,
    *,
    results: list | None = None,
    license: str | None = None,
    base_model: str | None = None,
) -> ModelCard:
    """The card of a checkpoint folder (any family): metadata, architecture, training, results, usage."""
    folder = Path(folder)
    config = read_json(folder / "config.json")
    if config is None:
        raise FileNotFoundError(f"{folder} has no config.json: save the model with save_pretrained first")
    name = repo_id or folder.name
    description, tags, citations = _describe(config)
    facts, training_citations, recorded_base, _ = _training(folder)
    pooling, similarity, normalised = _st_settings(folder)
    evaluations = _results(folder, results)
    eval_results = []
    for result in evaluations:
        dataset = result["dataset"]
        for key, value in result["metrics"].items():
            if key in RESULT_METRICS:
                metric_type, metric_name = RESULT_METRICS[key]
                eval_results.append(EvalResult(
                    task_type="retrieval", task_name="Retrieval", dataset_type=dataset["name"],
                    dataset_name=dataset["name"], dataset_split=dataset["split"], metric_type=metric_type,
                    metric_value=round(float(value), 4), metric_name=metric_name,
                ))
    data = ModelCardData(
        model_name=name,
        library_name="sentence-transformers" if pooling is not None else "transformers",
        pipeline_tag="feature-extraction",
        tags=[*tags, "dense-encoders", "sentence-transformers", "dense-retrieval", "feature-extraction"],
        base_model=base_model or recorded_base,
        datasets=sorted({r["dataset"]["name"] for r in evaluations}) or None,
        license=license,
        eval_results=eval_results or None,
    )
    lines = [f"# {name}", "", description, "", *_conversion(folder)]
    if similarity or pooling:
        lines += [f"Sentence-transformers configuration: {pooling or 'model'} pooling, {similarity or 'cosine'} "
                  "similarity.", ""]
    if facts:
        lines += ["## Training", "", *facts, ""]
    if evaluations:
        lines += ["## Results", "", "| dataset | split | " + " | ".join(RESULT_METRICS[k][1] for k in RESULT_METRICS)
                  + " | documents/s |", "|:--|:--|" + "--:|" * (len(RESULT_METRICS) + 1)]
        levels = sorted({r.get("settings", {}).get("relevance_level", 1) for r in evaluations})
        for result in evaluations:
            cells = [f"{result['metrics'][k]:.4f}" if k in result["metrics"] else "-" for k in RESULT_METRICS]
            speed = result.get("throughput", {}).get("documents_per_s")
            device = result.get("environment", {}).get("device", "")
            level = result.get("settings", {}).get("relevance_level", 1)
            split = result["dataset"]["split"] + (f" (relevance level {level})" if len(levels) > 1 else "")
            lines.append(f"| {result['dataset']['name']} | {split} | " + " | ".join(cells)
                         + f" | {f'{speed:.1f} ({device})' if speed else '-'} |")
        lines += ["", "Measured with `dense-encoders evaluate` (exact search, ir-measures); relevance level "
                  f"{', '.join(map(str, levels))}: MRR, Recall and Hits count a judgement of at least that grade "
                  "as relevant, nDCG uses the graded judgements.", ""]
    lines += ["## Usage", "", _usage(name, config.get("model_type"), pooling, similarity, normalised,
                                     *_sides(folder)), ""]
    limitations = []
    if config.get("model_type") == "tite":
        limitations.append(f"Texts longer than {config.get('max_position_embeddings')} tokens must be truncated: "
                           "the pooling schedule reaches one vector only up to that length.")
    if not evaluations:
        limitations.append("No evaluation results were recorded with this checkpoint.")
    if pretraining := read_json(folder / "pretraining_setup.json"):
        limitations.append(f"Pre-trained with the {pretraining.get('architecture')} objective only: fine-tune it on "
                           "relevance data before using it for retrieval.")
    if limitations:
        lines += ["## Limitations", "", *[f"- {item}" for item in limitations], ""]
    all_citations = citations + [c for c in training_citations if c not in citations]
    if all_citations:
        lines += ["## Citation", "", "```bibtex", "\n\n".join(all_citations), "```", ""]
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines))


__all__ = ["CE_EMBEDDINGS_BIBTEX", "DISTILLATION_BIBTEX", "RECORD_FILES", "TITE_BIBTEX", "model_card"]
