"""Checkpoints the TITE authors' code wrote (tests/fixtures/tite_authors/late/, see its README), converted by
``dense-encoders convert``: the converted folders reproduce the vectors the authors' code computed
(``expected.safetensors``), and the unconverted folders are never loaded with wrong numbers.

The fixture is a tiny TITE with the structure of the authors' released configuration: learned absolute
positions AND interleaved rotary pairs, intra pooling 32 -> 1, gelu_pytorch_tanh, post-LayerNorm.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import FLOAT64_TOLERANCE, TITE_AUTHORS, cpu_only_env, run_python_without_package, write_tite_tokenizer

from dense_encoders import TiteConfig, TiteModel
from dense_encoders.checkpoints import ConversionError, convert_checkpoint, find_format
from dense_encoders.checkpoints.tite_authors import interleaved_to_half_rows, tite_config_from_authors

AUTHORS = TITE_AUTHORS
BATCHES = ("A_right_padded_32", "A_left_padded_32", "B_right_padded_24", "C_right_padded_16", "D_all_length_1")
FLOAT32_ATOL = 1e-4  # the bound for float32; observed differences are ~5e-6 (vectors of magnitude ~3)


def expected_batches() -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(AUTHORS / "expected.safetensors")


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> dict[str, Path]:
    """Both fixture folders converted once for the module (the source folders are only read)."""
    root = tmp_path_factory.mktemp("converted")
    return {kind: convert_checkpoint(AUTHORS / kind, root / kind) for kind in ("encoder", "pretraining")}


def authors_config() -> dict:
    return json.loads((AUTHORS / "encoder" / "config.json").read_text())


# ---------------------------------------------------------------- the fixture is the authors' bytes


def test_the_fixture_holds_the_bytes_the_authors_code_wrote():
    """Every file of the fixture has the sha256 its README records (so no one rewrites the evidence by accident),
    and the README records every file."""
    import hashlib

    recorded = dict(line.split()[::-1] for line in re.findall(r"^[0-9a-f]{64}  late/\S+$",
                                                                (AUTHORS.parent / "README.md").read_text(), re.M))
    present = {str(path.relative_to(AUTHORS.parent)): hashlib.sha256(path.read_bytes()).hexdigest()
               for path in sorted(AUTHORS.rglob("*")) if path.is_file()}
    assert len(present) == 5 and present == recorded


# ---------------------------------------------------------------- the converted folders' vectors


@pytest.mark.numerics
def test_converted_folders_reproduce_the_authors_vectors_without_our_package(converted, tmp_path):
    """AutoModel in a process where dense_encoders cannot be imported: float64 within 1e-10, float32 within
    1e-4, every batch (the left-padded one included); the differences are printed for the closing note."""
    code = f"""
import json, torch
from safetensors.torch import load_file
from transformers import AutoModel
expected = load_file({str(AUTHORS / "expected.safetensors")!r})
report = {{}}
for kind, folder in {json.dumps({k: str(v) for k, v in converted.items()})}.items():
    model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
    for name in {list(BATCHES)!r}:
        ids, mask = expected[name + ".input_ids"], expected[name + ".attention_mask"]
        with torch.no_grad():
            for dtype in ("float64", "float32"):
                if name + "." + dtype not in expected:
                    continue
                vectors = model.to(getattr(torch, dtype))(ids, attention_mask=mask).pooler_output
                report[kind + "/" + name + "/" + dtype] = (vectors - expected[name + "." + dtype]).abs().max().item()
print(json.dumps(report))
"""
    report = json.loads(run_python_without_package(code, tmp_path).stdout.strip().splitlines()[-1])
    print(json.dumps(report, indent=1))
    assert len(report) == 2 * (2 * len(BATCHES) - 1)
    for key, difference in report.items():
        assert difference <= (1e-10 if key.endswith("float64") else FLOAT32_ATOL), (key, difference)


@pytest.mark.numerics
def test_save_reload_and_sentence_transformers_give_the_same_vectors(converted, tmp_path, tok):
    """A converted folder is an ordinary checkpoint: saved again, reloaded and encoded by sentence-transformers
    (with a tokenizer over the fixture's 100-token vocabulary), the vectors stay the authors'."""
    from sentence_transformers import SentenceTransformer
    from transformers import BertTokenizerFast

    expected = expected_batches()
    model = TiteModel.from_pretrained(converted["encoder"]).double().eval()
    resaved = tmp_path / "resaved"
    model.save_pretrained(resaved)
    vocab = [tok.convert_ids_to_tokens(i) for i in range(100)]  # [PAD] at 0 as in the fixture
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(tmp_path / "vocab.txt"), model_max_length=32)
    tokenizer.save_pretrained(resaved)
    reloaded = TiteModel.from_pretrained(resaved).double().eval()
    with torch.no_grad():
        for name in BATCHES:
            ids, mask = expected[f"{name}.input_ids"], expected[f"{name}.attention_mask"]
            vectors = reloaded(ids, attention_mask=mask).pooler_output
            torch.testing.assert_close(vectors, expected[f"{name}.float64"], **FLOAT64_TOLERANCE)
    texts = ["[unused1] [unused2] [unused3]", "[unused7]", "[unused4] [unused9] [unused11] [unused30] [unused44]"]
    encoder = SentenceTransformer(str(resaved), device="cpu", trust_remote_code=True).double()
    encoded = torch.as_tensor(encoder.encode(texts, convert_to_numpy=True))
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        direct = reloaded(batch["input_ids"], attention_mask=batch["attention_mask"]).pooler_output
    torch.testing.assert_close(encoded, direct, **FLOAT64_TOLERANCE)
    assert encoder.similarity_fn_name == "dot"


def test_conversion_record_and_card_name_the_source(converted):
    record = json.loads((converted["pretraining"] / "conversion.json").read_text())
    # the folder's name only: no local path is recorded (it means nothing on the Hub and tells where one works)
    assert record["source_format"] == "tite-authors" and record["source"] == "pretraining"
    assert "source_revision" not in record
    assert record["converted_at"] and record["source_description"].startswith("the TITE authors' code")
    assert record["rotary_pairs"].startswith("interleaved")
    assert any(name.startswith("heads.bow_auto_encoding") for name in record["dropped_tensors"])
    card = (converted["pretraining"] / "README.md").read_text()
    assert "Converted from a local folder named `pretraining`" in card
    for text in (card, (converted["pretraining"] / "conversion.json").read_text()):
        assert str(AUTHORS) not in text and str(AUTHORS.resolve()) not in text
    config = json.loads((converted["encoder"] / "config.json").read_text())
    assert config["position_embedding_type"] == "absolute+rotary" and config["hidden_act"] == "gelu_pytorch_tanh"
    assert config["model_type"] == "tite" and "rotary_interleaved" not in config


def test_the_pretraining_positions_come_from_the_mae_head(converted):
    """The authors' bookkeeping drops tite.embeddings.position_embeddings.weight from the pre-training file; the
    table is read from heads.enhanced_masked_auto_encoding.position_embeddings.weight."""
    from safetensors.torch import load_file

    source = load_file(AUTHORS / "pretraining" / "model.safetensors")
    assert "tite.embeddings.position_embeddings.weight" not in source
    ours = load_file(converted["pretraining"] / "model.safetensors")
    assert torch.equal(ours["embeddings.position_embeddings.weight"],
                       source["heads.enhanced_masked_auto_encoding.position_embeddings.weight"])


# ---------------------------------------------------------------- exact mappings, by hand


@pytest.mark.numerics
def test_interleaved_rotary_equals_rotate_half_after_the_row_permutation():
    """RoPE on interleaved pairs (2m, 2m+1) at angle p * theta^(-2m/d), written out by hand, equals our
    rotate-half RoPE on the permuted features, and dot products of rotated queries and keys are equal."""
    from dense_encoders.models.tite.rotary_tite import apply_rotary_rows, rotary_table

    head_dim, positions = 8, torch.tensor([0, 1, 3, 7, 12])
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(len(positions), 1, head_dim, generator=generator, dtype=torch.float64)
    key = torch.randn(len(positions), 1, head_dim, generator=generator, dtype=torch.float64)

    def interleaved(x):
        out = x.clone()
        for row, position in enumerate(positions.tolist()):
            for m in range(head_dim // 2):
                angle = torch.tensor(position * 10000.0 ** (-2 * m / head_dim), dtype=torch.float64)
                a, b = x[row, 0, 2 * m], x[row, 0, 2 * m + 1]
                out[row, 0, 2 * m], out[row, 0, 2 * m + 1] = (a * angle.cos() - b * angle.sin(),
                                                              b * angle.cos() + a * angle.sin())
        return out

    order = interleaved_to_half_rows(head_dim)
    rows = rotary_table(head_dim, 10000.0, 64, torch.device("cpu"), torch.float64).index_select(0, 2 * positions)
    ours = apply_rotary_rows(query[..., order], rows)
    torch.testing.assert_close(ours, interleaved(query)[..., order], **FLOAT64_TOLERANCE)
    scores_theirs = interleaved(query)[:, 0] @ interleaved(key)[:, 0].T
    scores_ours = ours[:, 0] @ apply_rotary_rows(key[..., order], rows)[:, 0].T
    torch.testing.assert_close(scores_ours, scores_theirs, **FLOAT64_TOLERANCE)


@pytest.mark.numerics
def test_the_position_table_is_folded_through_the_down_projection(tmp_path):
    """With upscaling the authors add downscale(word) + downscale(position) at the first width; the converted
    model adds the folded table: checked on the embedding layer's output, computed by hand (a float64 source,
    so that the folded table is stored without rounding)."""
    from safetensors.torch import save_file

    raw = authors_config()
    raw.update(hidden_sizes=[32, 32, 64, 64, 64, 64], num_attention_heads=[2, 2, 4, 4, 4, 4])
    generator = torch.Generator().manual_seed(1)
    f64 = dict(generator=generator, dtype=torch.float64)
    tensors = {"embeddings.word_embeddings.weight": torch.randn(100, 64, **f64),
               "embeddings.position_embeddings.weight": torch.randn(32, 64, **f64),
               "embeddings.downscale.weight": torch.randn(32, 64, **f64),
               "embeddings.norm.weight": torch.rand(32, **f64) + 0.5,
               "embeddings.norm.bias": torch.randn(32, **f64)}
    config, _ = tite_config_from_authors(raw)
    for name, parameter in TiteModel(config).state_dict().items():
        if name.startswith("layers."):
            index, _, rest = name[len("layers."):].partition(".")
            theirs = {"attention.LayerNorm": "attention.norm", "intermediate": "mlp.intermediate_dense",
                      "output": "mlp.out_dense", "LayerNorm": "mlp.norm"}
            module, _, leaf = rest.rpartition(".")
            tensors[f"encoder.layers.{index}.{theirs.get(module, module)}.{leaf}"] = torch.randn(parameter.shape, **f64)
    source = tmp_path / "upscaled"
    source.mkdir()
    (source / "config.json").write_text(json.dumps(raw))
    save_file(tensors, source / "model.safetensors")
    model = TiteModel.from_pretrained(convert_checkpoint(source, tmp_path / "out"), dtype=torch.float64)
    ids, positions = torch.tensor([5, 9, 17, 3]), torch.tensor([0, 1, 2, 3])
    t = tensors
    by_hand = t["embeddings.word_embeddings.weight"][ids] @ t["embeddings.downscale.weight"].T + \
        t["embeddings.position_embeddings.weight"][positions] @ t["embeddings.downscale.weight"].T
    by_hand = torch.nn.functional.layer_norm(by_hand, (32,), t["embeddings.norm.weight"], t["embeddings.norm.bias"],
                                             1e-12)
    torch.testing.assert_close(model.eval().embeddings(ids, positions, None), by_hand, **FLOAT64_TOLERANCE)


# ---------------------------------------------------------------- never silently wrong


@pytest.mark.parametrize("kind", ["encoder", "pretraining"])
def test_loading_the_authors_folders_directly_is_refused_with_the_command(kind):
    from transformers import AutoModel, AutoModelForPreTraining

    folder = AUTHORS / kind
    for load in (AutoModel.from_pretrained, TiteModel.from_pretrained, AutoModelForPreTraining.from_pretrained):
        with pytest.raises(ValueError, match=r"TITE authors' code .*dense-encoders convert") as refused:
            load(folder)
        assert "\n" not in str(refused.value)


def test_the_command_line_refuses_the_authors_folder_in_one_line(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "d1", "text": "a text"}) + "\n")
    result = subprocess.run(
        [sys.executable, "-m", "dense_encoders.cli", "encode", str(AUTHORS / "encoder"), str(corpus),
         "--output", str(tmp_path / "shards")],
        capture_output=True, text=True, env=cpu_only_env(), timeout=300,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and f"dense-encoders convert {AUTHORS / 'encoder'} OUT" in result.stderr
    assert not (tmp_path / "shards").exists()


def test_the_authors_weights_under_our_config_are_refused_not_randomly_initialised(tmp_path):
    """Someone rewrote config.json by hand but kept the authors' weights: 98 tensors would be random."""
    folder = tmp_path / "hand-edited"
    shutil.copytree(AUTHORS / "encoder", folder)
    config, _ = tite_config_from_authors(authors_config())
    config.save_pretrained(folder)
    with pytest.raises(ValueError, match=r"does not match TiteModel, .*: \d+ tensors of the model are missing .*"
                                         r"dense-encoders convert.*allow_missing_weights=True"):
        TiteModel.from_pretrained(folder)
    model = TiteModel.from_pretrained(folder, allow_missing_weights=True)  # asked for: loads
    assert isinstance(model, TiteModel)


def test_our_own_checkpoints_still_load_and_pretraining_heads_may_start_fresh(tmp_path):
    from dense_encoders import TiteForPreTraining
    from dense_encoders.models.tite import tite_preset

    TiteModel(tite_preset("tiny-tite-2-late")).save_pretrained(tmp_path / "encoder")
    assert isinstance(TiteModel.from_pretrained(tmp_path / "encoder"), TiteModel)
    assert isinstance(TiteForPreTraining.from_pretrained(tmp_path / "encoder"), TiteForPreTraining)
    assert find_format(tmp_path / "encoder") is None  # ours: no conversion offered


# ---------------------------------------------------------------- refusals


REFUSALS = [
    (dict(norm_location="pre"), r"norm_location='pre'"),
    (dict(norm_location="qkv"), r"norm_location='qkv'"),
    (dict(norm_type="rms"), r"norm_type='rms'.*RMSNorm"),
    (dict(relative_positional_embedding_type="alibi"), r"relative_positional_embedding_type='alibi'.*ALiBi"),
    (dict(hidden_act="swiglu"), r"hidden_act='swiglu'.*SwiGLU"),
    (dict(kernel_sizes=[None, 3, 3, 3, 3, 3], strides=[None, 2, 2, 2, 2, 2]),
     r"kernel_sizes\[1\]=3 != strides\[1\]=2 with rotary positions"),
]


@pytest.mark.parametrize("change, message", REFUSALS)
def test_unsupported_options_are_refused_by_name(tmp_path, change, message):
    folder = tmp_path / "source"
    shutil.copytree(AUTHORS / "encoder", folder)
    config = {**authors_config(), **change}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConversionError, match=message) as refused:
        convert_checkpoint(folder, tmp_path / "out")
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir()] == ["source"]


# config.json and the weights disagree (the items 11 and 12): one line naming config.json, the key and both
# values, before any model is built (before: a traceback of load_state_dict's size mismatches, or a TypeError)
CONFIG_MISMATCHES = [
    (dict(vocab_size=120), r"says vocab_size=120 but the weights \(model\.safetensors\) have vocab_size=100 "
                           r"\(embeddings\.word_embeddings\.weight has shape \(100, 64\)\)"),
    (dict(hidden_sizes=[32] * 6, num_attention_heads=[4] * 6),
     r"says hidden_sizes=\[32, 32, 32, 32, 32, 32\] but the weights \(model\.safetensors\) have "
     r"hidden_sizes=\[64, 64, 64, 64, 64, 64\].*or set hidden_sizes to \[64, 64, 64, 64, 64, 64\]\)"),
    (dict(hidden_sizes=32, num_attention_heads=4), r"says hidden_sizes=32 but the weights \(model\.safetensors\) "
                                                   r"have hidden_sizes=\[64, 64, 64, 64, 64, 64\].*or set "
                                                   r"hidden_sizes to 64\)"),
    (dict(intermediate_sizes=100), r"says intermediate_sizes=100 but the weights \(model\.safetensors\) have "
                                   r"intermediate_sizes=\[128, 128, 128, 128, 128, 128\]"),
    (dict(num_hidden_layers=5), r"says num_hidden_layers=5 but the weights \(model\.safetensors\) have "
                                r"num_hidden_layers=6 \(encoder\.layers\.0-5\)"),
    (dict(max_position_embeddings=64), r"says max_position_embeddings=64 but the weights \(model\.safetensors\) "
                                       r"have max_position_embeddings=32"),
    (dict(num_attention_heads="four"), r"num_attention_heads='four' is not an integer or a list of integers"),
]


@pytest.mark.parametrize("change, message", CONFIG_MISMATCHES)
def test_config_and_weights_that_disagree_are_one_line_naming_config_json(tmp_path, capsys, change, message):
    from dense_encoders import cli

    folder = tmp_path / "source"
    shutil.copytree(AUTHORS / "encoder", folder)
    (folder / "config.json").write_text(json.dumps({**authors_config(), **change}))
    assert cli.main(["convert", str(folder), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"dense-encoders convert: error: {folder / 'config.json'}") and re.search(message, err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["source"]


def test_a_missing_architecture_key_is_refused_and_the_cli_says_so_in_one_line(tmp_path):
    folder = tmp_path / "source"
    shutil.copytree(AUTHORS / "encoder", folder)
    config = authors_config()
    del config["norm_location"]
    (folder / "config.json").write_text(json.dumps(config))
    result = subprocess.run([sys.executable, "-m", "dense_encoders.cli", "convert", str(folder), str(tmp_path / "out")],
                            capture_output=True, text=True, env=cpu_only_env(), timeout=300)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "lacks norm_location" in result.stderr and not (tmp_path / "out").exists()


def test_our_config_accepts_absolute_and_rotary_positions_together():
    config = TiteConfig(num_hidden_layers=2, hidden_sizes=16, num_attention_heads=2, intermediate_sizes=32,
                        kernel_sizes=[None, 2], max_position_embeddings=2, position_embedding_type="absolute+rotary")
    assert config.absolute_positions and config.rotary_positions
    model = TiteModel(config)
    assert model.embeddings.position_embeddings is not None
    with pytest.raises(ValueError, match="position_embedding_type='alibi'"):
        TiteConfig(position_embedding_type="alibi")


def test_a_hub_id_converts_from_the_cache_and_the_card_names_the_repository(tmp_path, monkeypatch):
    """``convert ORG/NAME`` goes through huggingface_hub (offline here: its cache); the record names the
    repository and revision instead of a local path."""
    import huggingface_hub

    revision = "0123456789abcdef0123456789abcdef01234567"
    cache = tmp_path / "hub"
    snapshot = cache / "models--webis--tite-tiny" / "snapshots" / revision
    shutil.copytree(AUTHORS / "encoder", snapshot)
    (cache / "models--webis--tite-tiny" / "refs").mkdir()
    (cache / "models--webis--tite-tiny" / "refs" / "main").write_text(revision)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    out = convert_checkpoint("webis/tite-tiny", tmp_path / "out")
    record = json.loads((out / "conversion.json").read_text())
    assert (record["source"], record["source_revision"]) == ("webis/tite-tiny", revision)
    card = (out / "README.md").read_text()
    assert f"Converted from the Hub repository `webis/tite-tiny` at revision `{revision}`" in card
    for text in (card, (out / "conversion.json").read_text()):
        assert str(tmp_path) not in text and str(tmp_path.resolve()) not in text
    with pytest.raises(ConversionError, match=r"^webis/absent: no such folder, and the Hub repository could not be "):
        convert_checkpoint("webis/absent", tmp_path / "out2")


def test_the_output_may_not_overlap_the_source(tmp_path):
    source = tmp_path / "source"
    shutil.copytree(AUTHORS / "encoder", source)
    for output in (source, source / "inside", tmp_path):
        with pytest.raises(ConversionError, match="overlaps the source"):
            convert_checkpoint(source, output, overwrite=True)
    assert sorted(p.name for p in source.iterdir()) == ["config.json", "model.safetensors"]


@pytest.mark.numerics
def test_the_authors_tokenizer_is_carried_and_loads_without_their_package(tmp_path):
    """Their TiteTokenizer adds no [CLS]/[SEP] to a single text and needs their package: the converted folder's
    tokenizer is a PreTrainedTokenizerFast over the same tokenizer.json, and sentence-transformers encodes
    exactly what the model gives for the ids read straight from that file."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer

    source = tmp_path / "source"
    shutil.copytree(AUTHORS / "encoder", source)
    reference = write_tite_tokenizer(source, [], {"tokenizer_class": "TiteTokenizer"})
    out = convert_checkpoint(source, tmp_path / "out")
    texts = ["what is dense retrieval", "a long text about a river and a bridge in the mountain", "music"]
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert [tokenizer(t)["input_ids"] for t in texts] == [reference.encode(t).ids for t in texts]
    model = TiteModel.from_pretrained(out, dtype=torch.float64).eval()
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        direct = model(batch["input_ids"], attention_mask=batch["attention_mask"]).pooler_output
    encoder = SentenceTransformer(str(out), device="cpu").double()
    torch.testing.assert_close(torch.as_tensor(encoder.encode(texts)), direct, **FLOAT64_TOLERANCE)
