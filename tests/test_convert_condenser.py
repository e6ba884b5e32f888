"""Output folders of the reference Condenser code converted into our checkpoints (``condenser_reference``).

The source folders are built here from the documented format, not with the reference code (luyug/Condenser,
Gao & Callan, "Condenser: a Pre-training Architecture for Dense Retrieval", EMNLP 2021): its
``save_pretrained`` writes the backbone with ``BertForMaskedLM.save_pretrained`` (``model.safetensors``;
older transformers wrote ``pytorch_model.bin``, a ``torch.save``d state dict that also held the
``position_ids`` buffer), the head in ``model.pt`` as ``torch.save`` of a dict of ``c_head.N.*`` tensors
(N ``BertLayer`` state dicts; the coCondenser class adds its ``co_target`` buffer), the pickled argument
objects in ``args.pt``, and the tokenizer files. The Hub copies are the ``BertForMaskedLM`` folder alone.

Equivalence is checked in float64 against independent references: the source ``BertModel``'s last-layer
CLS vectors, and a hand-wired head (``BertLayer``s on [last-layer CLS ; hidden_states[skip_from][:, 1:]],
then the source's MLM head).
"""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import FLOAT64_TOLERANCE, random_mlm_batch, run_python_without_package, tiny_bert_config
from transformers import AutoModel, BertConfig, BertForMaskedLM, BertForPreTraining, BertModel
from transformers.models.bert.modeling_bert import BertLayer
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging as hf_logging

from dense_encoders import CoCondenserForPreTraining, CondenserForPreTraining, CondenserModel
from dense_encoders.checkpoints import ConversionError, condenser_reference, convert_checkpoint
from dense_encoders.checkpoints.folder import publishing_problems
from dense_encoders.models.condenser import modeling_condenser

TEXTS = ["dense passage retrieval", "a longer sentence about a condenser that pre-trains the cls vector", "river"]
LAYERS = 4


class _TouchOnUnpickle:
    """Pickles as a call of ``Path.touch(marker)``: unpickling ``args.pt`` would create the marker file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def _head_tensors(config, n_layers: int, seed: int = 1) -> dict[str, torch.Tensor]:
    """``c_head.N.*`` tensors of ``n_layers`` BertLayers with random weights (LayerNorms perturbed too)."""
    torch.manual_seed(seed)
    head = {}
    for index in range(n_layers):
        layer = BertLayer(config)
        with torch.no_grad():
            for parameter in layer.parameters():
                parameter.add_(0.05 * torch.randn_like(parameter))
        head.update({f"c_head.{index}.{name}": tensor for name, tensor in layer.state_dict().items()})
    return head


def write_reference_folder(folder: Path, tok, *, weights="safetensors", head_layers: int | None = 2,
                           co_target: bool = False, hidden_size: int = 32) -> Path:
    """A luyug/Condenser output folder as the reference code writes it; ``head_layers=None``: a Hub copy."""
    torch.manual_seed(0)
    config = tiny_bert_config(tok, num_hidden_layers=LAYERS, hidden_size=hidden_size)
    source = BertForMaskedLM(config)
    with torch.no_grad():  # a trained MLM head, not the fresh one
        source.cls.predictions.transform.dense.weight.normal_(0, 0.2)
        source.cls.predictions.bias.uniform_(-1, 1)
    source.save_pretrained(folder)
    if weights == "bin":  # older transformers: a torch.save'd state dict with the position_ids buffer
        (folder / "model.safetensors").unlink()
        state = {**source.state_dict(), "bert.embeddings.position_ids": torch.arange(128)[None]}
        torch.save(state, folder / "pytorch_model.bin")
    tok.save_pretrained(folder)
    if head_layers is not None:
        head = _head_tensors(config, head_layers)
        if co_target:
            head["co_target"] = torch.arange(8).view(-1, 2).flip([1]).flatten()
        torch.save(head, folder / "model.pt")
        torch.save(_TouchOnUnpickle(folder.parent / "ARGS_WERE_UNPICKLED"), folder / "args.pt")
    return folder


def _facts(folder: Path) -> dict:
    return json.loads((folder / "conversion.json").read_text())


def _reference_cls(source: Path, batch) -> torch.Tensor:
    """Independent reference: the source BertModel's last-layer CLS vectors, in float64."""
    bert = BertForMaskedLM.from_pretrained(source).bert.double().eval()  # BertModel, no pooler
    with torch.no_grad():
        return bert(**batch).last_hidden_state[:, 0]


def test_the_args_trap_is_live(tmp_path):
    """The args.pt written above does create its marker when unpickled (so its absence means something)."""
    marker = tmp_path / "marker"
    pickle.loads(pickle.dumps(_TouchOnUnpickle(marker)))
    assert marker.is_file()


# ---------------------------------------------------------------------------- equivalence


@pytest.mark.numerics
@pytest.mark.parametrize("weights, weights_file", [("safetensors", "model.safetensors"), ("bin", "pytorch_model.bin")])
def test_converted_folder_gives_the_source_vectors_without_the_package(tmp_path, tok, weights, weights_file):
    source = write_reference_folder(tmp_path / "luyug-run", tok, weights=weights)
    out = convert_checkpoint(source, tmp_path / "converted", skip_from=2)
    assert not (tmp_path / "ARGS_WERE_UNPICKLED").exists()
    facts = _facts(out)
    assert facts["source_weights"] == weights_file and facts["not_read"] == ["args.pt"]
    assert (facts["architecture"], facts["head_layers"], facts["skip_from"], facts["has_condenser_head"]) == (
        "CondenserForPreTraining", 2, 2, True)
    assert publishing_problems(out) == []
    code = f"""
import json, torch
from transformers import AutoModel, AutoTokenizer
from sentence_transformers import SentenceTransformer
texts = {TEXTS!r}
model = AutoModel.from_pretrained({str(out)!r}, trust_remote_code=True, dtype=torch.float64).eval()
batch = AutoTokenizer.from_pretrained({str(out)!r})(texts, padding=True, return_tensors="pt")
with torch.no_grad():
    auto = model(**batch).pooler_output
st = SentenceTransformer({str(out)!r}, trust_remote_code=True, device="cpu", model_kwargs={{"dtype": torch.float64}})
encoded = st.encode(texts, convert_to_tensor=True)
torch.save({{"auto": auto, "st": encoded, "class": type(model).__name__, "similarity": st.similarity_fn_name,
            "modules": [type(m).__name__ for m in st]}}, "vectors.pt")
"""
    run_python_without_package(code, cwd=tmp_path)
    got = torch.load(tmp_path / "vectors.pt", weights_only=True)
    reference = _reference_cls(source, tok(TEXTS, padding=True, return_tensors="pt"))
    assert got["class"] == "CondenserModel" and got["similarity"] == "dot" and "Normalize" not in got["modules"]
    assert got["auto"].dtype == got["st"].dtype == reference.dtype == torch.float64
    for name in ("auto", "st"):
        print(f"[{weights}] {name} vs source BertModel CLS: max abs diff {(got[name] - reference).abs().max():.3e}")
        torch.testing.assert_close(got[name], reference, **FLOAT64_TOLERANCE)


@pytest.mark.numerics
def test_pretraining_model_holds_the_head_and_matches_a_hand_wired_head_loss(tmp_path, tok):
    source = write_reference_folder(tmp_path / "luyug-run", tok, head_layers=3)
    out = convert_checkpoint(source, tmp_path / "converted", skip_from=1)
    head = torch.load(source / "model.pt", weights_only=True)
    model = CondenserForPreTraining.from_pretrained(out)
    assert (model.config.n_head_layers, model.config.skip_from) == (3, 1)
    converted_head = {f"c_head.{name}": tensor for name, tensor in model.c_head.state_dict().items()}
    assert converted_head.keys() == head.keys()
    assert all(torch.equal(converted_head[name], tensor) for name, tensor in head.items())

    batch = random_mlm_batch(vocab_size=len(tok))
    inputs = {key: batch[key] for key in ("input_ids", "attention_mask", "token_type_ids")}
    model = model.double().eval()
    reference_mlm = BertForMaskedLM.from_pretrained(source).double().eval()
    reference_mlm.config._attn_implementation = "eager"
    layers = []
    for index in range(3):
        layer = BertLayer(reference_mlm.config).double().eval()
        prefix = f"c_head.{index}."
        layer.load_state_dict({name[len(prefix):]: t for name, t in head.items() if name.startswith(prefix)})
        layers.append(layer)
    with torch.no_grad():
        loss = model(**batch).head_mlm_loss
        states = reference_mlm.bert(**inputs, output_hidden_states=True).hidden_states
        hidden = torch.cat([states[-1][:, :1], states[1][:, 1:]], dim=1)
        additive = (1.0 - batch["attention_mask"][:, None, None, :].double()) * torch.finfo(torch.float64).min
        for layer in layers:
            hidden = layer(hidden, additive)
        logits = reference_mlm.cls(hidden)
        reference = F.cross_entropy(logits.view(-1, logits.shape[-1]), batch["labels"].view(-1), ignore_index=-100)
    print(f"head MLM loss vs hand-wired reference: {float(loss):.6f}, max abs diff {(loss - reference).abs():.3e}")
    assert loss.dtype == torch.float64
    torch.testing.assert_close(loss, reference, **FLOAT64_TOLERANCE)


def test_converted_checkpoint_is_an_ordinary_one(tmp_path, tok):
    """Saves, reloads and publishes like any checkpoint of ours: no model.pt, no pickles, safetensors only."""
    out = convert_checkpoint(write_reference_folder(tmp_path / "luyug-run", tok), tmp_path / "converted")
    assert _facts(out)["skip_from"] == LAYERS // 2 and _facts(out)["skip_from_given"] is False
    assert not [p.name for p in out.iterdir() if p.suffix in (".pt", ".bin", ".pth", ".pkl")]
    model = CondenserForPreTraining.from_pretrained(out)
    model.save_pretrained(tmp_path / "again")
    again = CondenserForPreTraining.from_pretrained(tmp_path / "again")
    assert all(torch.equal(again.state_dict()[name], t) for name, t in model.state_dict().items())
    assert publishing_problems(out) == []


def test_cocondenser_head_file_drops_its_contrastive_targets(tmp_path, tok):
    source = write_reference_folder(tmp_path / "luyug-run", tok, co_target=True)
    out = convert_checkpoint(source, tmp_path / "converted", skip_from=2)
    facts = _facts(out)
    assert facts["architecture"] == "CoCondenserForPreTraining" and facts["dropped"] == ["co_target"]
    assert type(CoCondenserForPreTraining.from_pretrained(out)) is CoCondenserForPreTraining


@pytest.mark.numerics
def test_headless_hub_copy_converts_to_an_encoder_that_says_it_has_no_head(tmp_path, tok):
    source = write_reference_folder(tmp_path / "Luyu-condenser", tok, head_layers=None)
    out = convert_checkpoint(source, tmp_path / "converted")
    facts = _facts(out)
    assert facts["architecture"] == "CondenserModel" and facts["has_condenser_head"] is False
    assert "head_layers" not in facts and "skip_from" not in facts
    assert json.loads((out / "config.json").read_text())["architectures"] == ["CondenserModel"]
    assert publishing_problems(out) == []
    batch = tok(TEXTS, padding=True, return_tensors="pt")
    model = AutoModel.from_pretrained(out, dtype=torch.float64).eval()
    with torch.no_grad():
        ours = model(**batch).pooler_output
    reference = _reference_cls(source, batch)
    print(f"headless: CondenserModel vs source BertModel CLS: max abs diff {(ours - reference).abs().max():.3e}")
    torch.testing.assert_close(ours, reference, **FLOAT64_TOLERANCE)
    logger = hf_logging.get_logger(modeling_condenser.__name__)
    with CaptureLogger(logger) as captured:  # the genuine headless warning stays
        CondenserForPreTraining.from_pretrained(out)
    assert "FRESHLY INITIALISED" in captured.out
    with pytest.raises(ConversionError, match=r"skip_from=2 applies to the Condenser head.*drop --skip-from"):
        convert_checkpoint(source, tmp_path / "again", skip_from=2)


# ---------------------------------------------------------------------------- detection


def test_detection_claims_reference_folders_only(tmp_path, tok, condenser_folder):
    config = tiny_bert_config(tok, num_hidden_layers=2)
    BertModel(config, add_pooling_layer=False).save_pretrained(tmp_path / "encoder")
    BertForPreTraining(config).save_pretrained(tmp_path / "original-bert")  # pooler + NSP head: not a Condenser save
    assert condenser_reference.detect(write_reference_folder(tmp_path / "run", tok))
    assert condenser_reference.detect(write_reference_folder(tmp_path / "hub-copy", tok, head_layers=None))
    for folder in (tmp_path / "encoder", tmp_path / "original-bert", condenser_folder):
        assert not condenser_reference.detect(folder), folder
    with pytest.raises(ConversionError, match="none of the formats"):
        convert_checkpoint(tmp_path / "encoder", tmp_path / "out")


# ---------------------------------------------------------------------------- refusals


def _pickled_object(folder: Path):
    torch.save({"c_head.0.attention.self.query.weight": _TouchOnUnpickle(folder / "HEAD_WAS_UNPICKLED")},
               folder / "model.pt")


def _not_a_dict(folder: Path):
    torch.save(list(torch.load(folder / "model.pt", weights_only=True).values()), folder / "model.pt")


def _foreign_tensors(folder: Path):
    head = torch.load(folder / "model.pt", weights_only=True)
    torch.save({**head, "lm.cls.predictions.bias": torch.zeros(3), "query_head.0.output.dense.bias": torch.zeros(3)},
               folder / "model.pt")


def _gap(folder: Path):
    head = torch.load(folder / "model.pt", weights_only=True)
    torch.save({name.replace("c_head.1.", "c_head.2."): t for name, t in head.items()}, folder / "model.pt")


def _other_width(folder: Path):
    wider = BertConfig(hidden_size=64, num_attention_heads=4, intermediate_size=128)
    torch.save(_head_tensors(wider, 2), folder / "model.pt")


def _no_weights(folder: Path):
    (folder / "model.safetensors").unlink()


def _truncated_weights(folder: Path):
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])


def _incomplete_backbone(folder: Path):
    from safetensors.torch import load_file, save_file

    state = load_file(folder / "model.safetensors")
    del state["bert.encoder.layer.1.output.dense.weight"]
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})


@pytest.mark.parametrize("damage, message", [
    (_pickled_object, r"model\.pt is not a plain dict of tensors \(UnpicklingError.*never unpickled"),
    (_not_a_dict, r"model\.pt holds a list, not a dict of tensors"),
    (_foreign_tensors, r"not Condenser head layers \(c_head\.N\.\*\): lm\.cls\.predictions\.bias, query_head\.0\."),
    (_gap, r"model\.pt has head layers \[0, 2\] but not \[1\]"),
    (_other_width, r"c_head\.0\.attention\.self\.query\.weight has shape \(64, 64\).*hidden_size 32.*needs \(32, 32\)"),
    (_no_weights, r"has no backbone weights \(model\.safetensors or pytorch_model\.bin\)"),
    (_truncated_weights, r"model\.safetensors cannot be read.*truncated or corrupt"),
    (_incomplete_backbone, r"model\.safetensors is not a complete BertForMaskedLM.*bert\.encoder\.layer\.1\.output"),
])
def test_refusals_name_the_file_and_the_fix(tmp_path, tok, damage, message):
    source = write_reference_folder(tmp_path / "luyug-run", tok)
    damage(source)
    with pytest.raises(ConversionError, match=message) as refused:
        convert_checkpoint(source, tmp_path / "converted", skip_from=2)
    assert "\n" not in str(refused.value) and str(source) in str(refused.value)
    assert not (tmp_path / "converted").exists() and not (tmp_path / "HEAD_WAS_UNPICKLED").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["luyug-run"]  # no staging folder left


def _dangling_head(folder: Path):
    (folder / "model.pt").unlink()
    (folder / "model.pt").symlink_to(folder.parent / "elsewhere" / "model.pt")


def test_a_dangling_head_link_is_refused_not_converted_headless(tmp_path, tok):
    """model.pt is a link to a file that is gone (a moved run folder): the head must not vanish silently."""
    source = write_reference_folder(tmp_path / "luyug-run", tok)
    _dangling_head(source)
    with pytest.raises(ConversionError, match=rf"{source / 'model.pt'} is a symbolic link to "
                                              rf"{tmp_path / 'elsewhere' / 'model.pt'}, which does not exist.*"
                                              r"Put the run's model\.pt \(the head\) in its place") as refused:
        convert_checkpoint(source, tmp_path / "converted")
    assert "\n" not in str(refused.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["luyug-run"]


@pytest.mark.parametrize("head_layers, said", [
    (2, "(condenser-reference: CondenserForPreTraining with the 2-layer Condenser head of model.pt (skip_from 2))"),
    (None, "(condenser-reference: CondenserModel, the encoder alone: the source has no model.pt, so no Condenser "
           "head was converted)"),
])
def test_the_success_line_says_whether_a_head_was_converted(tmp_path, tok, capsys, head_layers, said):
    from dense_encoders import cli

    source = write_reference_folder(tmp_path / "luyug-run", tok, head_layers=head_layers)
    capsys.readouterr()
    assert cli.main(["convert", str(source), str(tmp_path / "converted")]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"converted {source} {said} -> {tmp_path / 'converted'}"), line


def _set_config(**values):
    def change(folder: Path):
        config = json.loads((folder / "config.json").read_text())
        config.update(values)
        (folder / "config.json").write_text(json.dumps(config))
    return change


# config.json and the weights disagree (the item 11 and 12): one line naming config.json, the key and both
# values, never "model.pt belongs to another run" (the head fits the weights; config.json is the odd one out)
CONFIG_MISMATCHES = [
    (2, _set_config(vocab_size=30522 + 8), r"says vocab_size=30530 but the weights \(model\.safetensors\) have "
                                           r"vocab_size=30522 \(bert\.embeddings\.word_embeddings\.weight has shape "
                                           r"\(30522, 32\)\)"),
    (None, _set_config(hidden_size=64, intermediate_size=128), r"says hidden_size=64 but the weights "
                                                               r"\(model\.safetensors\) have hidden_size=32"),
    (2, _set_config(hidden_size=64, intermediate_size=128), r"says hidden_size=64 but the weights "
                                                            r"\(model\.safetensors\) have hidden_size=32"),
    (2, _set_config(intermediate_size=128), r"says intermediate_size=128 but the weights \(model\.safetensors\) "
                                            r"have intermediate_size=64 \(bert\.encoder\.layer\.0\.intermediate"),
    (None, _set_config(num_hidden_layers=6), r"says num_hidden_layers=6 but the weights \(model\.safetensors\) have "
                                             r"num_hidden_layers=4 \(layers bert\.encoder\.layer\.0-3\)"),
    (2, _set_config(num_attention_heads="four"), r"num_attention_heads='four' is not an integer: write the number"),
    (None, _set_config(num_attention_heads=3), r"num_attention_heads=3 does not divide hidden_size=32"),
]


@pytest.mark.parametrize("head_layers, change, message", CONFIG_MISMATCHES)
def test_config_and_weights_that_disagree_are_one_line_naming_config_json(tmp_path, tok, capsys, head_layers, change,
                                                                          message):
    from dense_encoders import cli

    source = write_reference_folder(tmp_path / "luyug-run", tok, head_layers=head_layers)
    change(source)
    capsys.readouterr()  # the progress bars of building the source
    assert cli.main(["convert", str(source), str(tmp_path / "converted")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"{source / 'config.json'}" in err and re.search(message, err), err
    assert "belongs to another run" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["luyug-run"]


@pytest.mark.parametrize("skip_from, shown", [(LAYERS, "given"), (0, "given"), (True, "given")])
def test_skip_from_must_fit_the_backbone(tmp_path, tok, skip_from, shown):
    source = write_reference_folder(tmp_path / "luyug-run", tok)
    with pytest.raises(ConversionError, match=rf"skip_from={skip_from!r} \({shown}\) does not fit the 4-layer "
                                              r"backbone.*1 <= skip_from <= 3.*--skip-from") as refused:
        convert_checkpoint(source, tmp_path / "converted", skip_from=skip_from)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("head_layers, evidence", [(2, "model.pt and BertForMaskedLM weights (model.safetensors)"),
                                                    (None, "BertForMaskedLM weights (model.safetensors)")])
def test_a_reference_folder_without_config_json_is_told_so(tmp_path, tok, capsys, head_layers, evidence):
    """Issue 41 item 9: a luyug/Condenser output folder (or a headless copy) that lost its config.json is told, in
    one line, that config.json is missing and what writes it, not that it is in none of the formats; a folder
    of none of them still hears that."""
    from dense_encoders import cli

    source = write_reference_folder(tmp_path / "luyug-run", tok, head_layers=head_layers)
    (source / "config.json").unlink()
    capsys.readouterr()  # the progress bars of building the source
    assert cli.main(["convert", str(source), str(tmp_path / "converted")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"{source} has no config.json, yet holds a luyug/Condenser output folder's {evidence}:" in err, err
    assert "BertForMaskedLM.save_pretrained" in err and "none of the formats" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["luyug-run"]
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("not a checkpoint")
    assert cli.main(["convert", str(other), str(tmp_path / "converted")]) == 2
    assert "is in none of the formats" in capsys.readouterr().err


@pytest.mark.parametrize("model_class", [CondenserForPreTraining, CoCondenserForPreTraining, CondenserModel])
def test_from_pretrained_refuses_a_reference_output_folder(tmp_path, tok, model_class):
    source = write_reference_folder(tmp_path / "luyug-run", tok)
    with pytest.raises(ValueError, match=rf"{source} is a luyug/Condenser output folder.*dense-encoders convert "
                                         rf"{source} OUT") as refused:
        model_class.from_pretrained(source)
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "ARGS_WERE_UNPICKLED").exists()
