"""What a model card says of a Condenser / coCondenser checkpoint: its architecture paragraph and the papers it
follows (:func:`dense_encoders.hub.cards.model_card` renders the card; this module imports nothing of the
package). Information the config does not record is left out, not invented.
"""

from __future__ import annotations

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

def condenser_description(config: dict, *, converted: bool = False) -> tuple[str, list[str], list[str]]:
    """(architecture paragraph, tags, citations) of a Condenser / coCondenser config. A pre-training checkpoint
    (``CondenserForPreTraining`` / ``CoCondenserForPreTraining``) states its objective; the encoder alone
    (``CondenserModel``: a distilled student, an exported backbone) does not, since its config cannot tell which
    objective pre-trained it: the card's training records say that. ``converted``: a checkpoint of another
    implementation, whose own run is not recorded: the objective is the one continued pre-training uses."""
    architecture = (config.get("architectures") or ["CondenserForPreTraining"])[0]
    if architecture not in _FAMILIES and architecture != "CondenserModel":
        raise ValueError(f"a {architecture} is not a Condenser checkpoint; expected one of {sorted(_FAMILIES)}")
    shape = (f"{config['num_hidden_layers']} layers, hidden size {config['hidden_size']}, "
             f"{config['num_attention_heads']} heads, vocabulary {config['vocab_size']}")
    if architecture == "CondenserModel":
        text = (f"`{architecture}` ({shape}): the encoder of a Condenser-architecture model (layer "
                f"{config.get('skip_from')} feeds the {config.get('n_head_layers')}-layer pre-training head, which "
                "this checkpoint does not hold: continuing pre-training from it starts a fresh head). For retrieval, "
                "`AutoModel` gives `CondenserModel`; embed with the last-layer CLS vector (`pooler_output`).")
        return text, ["condenser"], [CONDENSER_BIBTEX]
    tag, description, objective, citations = _FAMILIES[architecture]
    late = " + masked-LM cross-entropy of the last layer" if config.get("late_mlm") else ""
    text = (f"`{architecture}` ({shape}): " + description.format(**config) + ". For retrieval, load the encoder "
            "(`AutoModel` gives `CondenserModel`, the head is not used) and embed with the last-layer CLS vector "
            "(`pooler_output`); the checkpoint keeps the pre-training head, so pre-training can continue from it.\n\n"
            + ("Objective of continued pre-training (the source run's own settings are not recorded): " if converted
               else "Pre-training objective: ") + objective.format(late=late) + " (each weight 1).")
    return text, [tag], list(citations)


__all__ = ["condenser_description", "CONDENSER_BIBTEX", "COCONDENSER_BIBTEX"]
