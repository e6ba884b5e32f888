"""Model cards for Condenser / coCondenser checkpoints, generated from what the folder records.

Built with huggingface_hub's ``ModelCard`` / ``ModelCardData``. Information the folder does not
record is left out, not invented.
"""

from __future__ import annotations

import json
from pathlib import Path

from huggingface_hub import ModelCard, ModelCardData

CONDENSER_BIBTEX = """@inproceedings{gao-callan-2021-condenser,
  title = {Condenser: a Pre-training Architecture for Dense Retrieval},
  author = {Gao, Luyu and Callan, Jamie},
  booktitle = {Proceedings of EMNLP 2021},
  year = {2021}
}"""

COCONDENSER_BIBTEX = """@inproceedings{gao-callan-2022-unsupervised,
  title = {Unsupervised Corpus Aware Language Model Pre-training for Dense Passage Retrieval},
  author = {Gao, Luyu and Callan, Jamie},
  booktitle = {Proceedings of ACL 2022},
  year = {2022}
}"""

_FAMILIES = {
    "CondenserForPreTraining": (
        "condenser",
        "a BERT encoder pre-trained with the Condenser head: {n_head_layers} head layers read the last layer's "
        "CLS vector and the token states of layer {skip_from}, so masked-token prediction in the head has to go "
        "through the CLS vector",
        "masked-LM cross-entropy of the head{late}",
        (CONDENSER_BIBTEX,),
    ),
    "CoCondenserForPreTraining": (
        "cocondenser",
        "a BERT encoder pre-trained with the Condenser head ({n_head_layers} head layers over the last-layer CLS "
        "vector and layer {skip_from}) plus coCondenser's span contrastive loss, which pulls together two "
        "spans of the same document against all spans of the global batch",
        "masked-LM cross-entropy of the head{late} + span contrastive loss",
        (CONDENSER_BIBTEX, COCONDENSER_BIBTEX),
    ),
}

USAGE = """```python
from transformers import AutoModel, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("{repo}", trust_remote_code=True)
model = AutoModel.from_pretrained("{repo}", trust_remote_code=True)
batch = tokenizer(["what is dense retrieval?"], padding=True, truncation=True, return_tensors="pt")
embeddings = model(**batch).pooler_output  # last-layer CLS vectors; score with the dot product
```

```python
from sentence_transformers import SentenceTransformer

model = SentenceTransformer("{repo}", trust_remote_code=True)  # CLS pooling, dot product
embeddings = model.encode(["what is dense retrieval?"])
```"""


def _training_facts(folder: Path) -> list[str]:
    """Bullet lines read from ``trainer_state.json`` / ``pretraining_setup.json``, when present."""
    facts = []
    state_path, setup_path = folder / "trainer_state.json", folder / "pretraining_setup.json"
    if state_path.is_file():
        state = json.loads(state_path.read_text())
        facts.append(f"- optimizer steps: {state.get('global_step')}")
        if state.get("train_batch_size"):
            facts.append(f"- batch size per device: {state['train_batch_size']}")
        losses = [entry for entry in state.get("log_history", []) if "loss" in entry]
        if losses:
            last = losses[-1]
            parts = [f"{key} {last[key]:.4g}" for key in ("loss", "head_mlm_loss", "late_mlm_loss", "contrastive_loss")
                     if isinstance(last.get(key), (int, float))]
            facts.append(f"- last logged losses (step {last.get('step')}): " + ", ".join(parts))
    if setup_path.is_file():
        setup = json.loads(setup_path.read_text())
        for key, label in (("backbone", "warm start"), ("init_from", "continued from"),
                           ("max_seq_length", "sequence length"), ("mlm_probability", "whole-word masking rate")):
            if setup.get(key) is not None:
                facts.append(f"- {label}: {setup[key]}")
    return facts


def condenser_model_card(folder: str | Path, repo_id: str | None = None, license: str | None = None) -> ModelCard:
    """A card for a Condenser / coCondenser checkpoint folder written by ``save_pretrained``."""
    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text())
    architecture = (config.get("architectures") or ["CondenserForPreTraining"])[0]
    if architecture not in _FAMILIES:
        raise ValueError(f"{folder} holds a {architecture}; condenser_model_card covers {sorted(_FAMILIES)}.")
    tag, description, objective, citations = _FAMILIES[architecture]
    setup_path = folder / "pretraining_setup.json"
    backbone = json.loads(setup_path.read_text()).get("backbone") if setup_path.is_file() else None
    data = ModelCardData(
        library_name="transformers",
        pipeline_tag="feature-extraction",
        tags=[tag, "sentence-transformers", "dense-retrieval", "feature-extraction"],
        base_model=backbone if backbone and not Path(backbone).exists() else None,
        license=license,
    )
    name = repo_id or folder.name
    shape = (f"{config['num_hidden_layers']} layers, hidden size {config['hidden_size']}, "
             f"{config['num_attention_heads']} heads, vocabulary {config['vocab_size']}")
    lines = [
        f"# {name}", "",
        f"`{architecture}` ({shape}): " + description.format(**config) + ".", "",
        "For retrieval, load the encoder (`AutoModel` gives `CondenserModel`, the head is not used) and embed "
        "with the last-layer CLS vector; the checkpoint also keeps the pre-training head, so pre-training can continue "
        "from it.", "",
        "## Training", "",
        "Objective: " + objective.format(late=" + masked-LM cross-entropy of the last layer" if config.get("late_mlm") else "")
        + " (each weight 1).",
        *_training_facts(folder), "",
        "## Usage", "", USAGE.format(repo=name), "",
        "## Limitations", "",
        "A pre-trained (not fine-tuned) encoder: the papers fine-tune it on relevance data before retrieval; "
        "its raw embeddings are not a retrieval model by themselves.", "",
        "## Citation", "", "```bibtex", "\n\n".join(citations), "```", "",
    ]
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines))


__all__ = ["condenser_model_card", "CONDENSER_BIBTEX", "COCONDENSER_BIBTEX"]
