"""TITE exports (issue 42 §7): ``torch.export.export`` and ``torch.onnx.export(..., dynamo=True)`` of ``TiteModel``.

The default forward plans every batch on the host (``plan_tite``), which no tracer can follow; while one records
the forward, ``TiteModel`` takes ``padded_tite``'s path, tensor operations only. Checked here:

* the padded path IS the planned path (float64: every preset, padding on either side, projection, token types,
  a pooling stride below the kernel, empty texts, mean pooling), and eager calls still plan;
* ``torch.export.export`` with a dynamic batch size and length gives the eager vectors (float32, 1e-5) for every
  variant of the paper's Table 3, on batches of other sizes, lengths and padding sides than the example;
* ``torch.onnx.export(..., dynamo=True)`` of a late and a staggered TITE, run through onnxruntime on texts of mixed
  lengths, gives the eager vectors; so does the legacy exporter (``dynamo=False``, through ``torch.jit.trace``);
* a saved folder carries the path: its remote code exports without the package, and the program runs.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from conftest import FLOAT64_TOLERANCE, run_python_without_package

from dense_encoders.models.tite import modeling_tite, padded_tite
from dense_encoders.models.tite.configuration_tite import TiteConfig
from dense_encoders.models.tite.modeling_tite import TiteModel
from dense_encoders.models.tite.presets import TINY_PRESETS, tite_preset

VOCAB = 60
# the paper's Table 3 variants (1) to (7) at the tiny size, and TITE without pooling
PRESETS = sorted(TINY_PRESETS)
EXPORT_ATOL = 1e-5  # float32 vectors of LayerNorm'd states (|x| of a few units): ~10x the observed 1e-6
TEXTS = [
    "dense retrieval",
    "a token independent text encoder pools every text down to one vector inside its layers",
    "what",
    "how does a river cross a mountain",
    "protein enzyme music bridge neural network search index",
]


def tiny(name: str | TiteConfig, **overrides) -> TiteModel:
    torch.manual_seed(0)
    config = name if isinstance(name, TiteConfig) else tite_preset(name, **{"vocab_size": VOCAB, **overrides})
    return TiteModel(config).eval()


def ragged(lengths: list[int], width: int, left: tuple[int, ...] = (), seed: int = 0) -> dict[str, torch.Tensor]:
    """A batch of texts of ``lengths`` tokens padded to ``width``, on the right, or on the left for rows ``left``."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, VOCAB, (len(lengths), width), generator=generator)
    attention_mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()
    for row in left:
        attention_mask[row] = attention_mask[row].flip(0)
    token_type_ids = torch.randint(0, 2, (len(lengths), width), generator=generator) * attention_mask
    return {"input_ids": input_ids * attention_mask, "attention_mask": attention_mask, "token_type_ids": token_type_ids}


def batches(config: TiteConfig) -> list[dict[str, torch.Tensor]]:
    """Batches unlike the export example: one text of one token, lengths up to the longest the model takes,
    left padding."""
    longest = config.max_position_embeddings
    return [
        ragged([1], 1),
        ragged([3, 1], 5, left=(1,), seed=1),
        ragged([longest, 2, longest - 3, 5, 1, 9], longest, left=(3,), seed=2),
    ]


def assert_same_outputs(padded, planned, **tolerance):
    """The padded path's outputs against the planned forward's; without pooling, its token states have the input's
    length and the planned ones the longest text's: the rows past it must be zeros."""
    torch.testing.assert_close(padded.pooler_output, planned.pooler_output, **tolerance)
    longest = planned.last_hidden_state.shape[1]
    torch.testing.assert_close(padded.last_hidden_state[:, :longest], planned.last_hidden_state, **tolerance)
    assert not padded.last_hidden_state[:, longest:].any()


# ---------------------------------------------------------------------------- the padded path is the planned path


EQUIVALENCE_CASES = [(name, {}) for name in PRESETS] + [
    ("tiny-tite-2-staggered", dict(projection_size=8, position_embedding_type="absolute+rotary", type_vocab_size=2)),
    ("tiny-tite-2-late-post", dict(projection_size=8, projection_bias=False)),
    ("tiny-tite-3-late", dict(strides=[None, 2, 2, 2], max_position_embeddings=9)),  # overlapping windows: s < k
    ("tiny-tite-2-late-pre", dict(empty_texts="zeros", projection_size=8)),
    ("tiny-tite-no-pooling", dict(output_pooling="mean", position_embedding_type="absolute", type_vocab_size=2)),
    ("tiny-tite-no-pooling", dict(empty_texts="zeros")),
]


@pytest.mark.numerics
@pytest.mark.parametrize("name, overrides", EQUIVALENCE_CASES, ids=[
    f"{name}-{'-'.join(overrides) or 'preset'}" for name, overrides in EQUIVALENCE_CASES])
def test_padded_path_equals_the_planned_path(name, overrides):
    model = tiny(name, **overrides).double()
    config = model.config
    longest = config.max_position_embeddings
    batch = ragged([longest, 1, 5, longest - 3, 2, 4], longest + 2, left=(2, 5))  # padding past the table too
    if config.empty_texts == "zeros":
        batch["attention_mask"][1] = 0
    with torch.no_grad():
        planned = model(**batch)
        padded = padded_tite.padded_forward(model, **batch)
    assert padded.pooler_output.dtype == torch.float64
    assert_same_outputs(padded, planned, **FLOAT64_TOLERANCE)


@pytest.mark.numerics
def test_padded_path_tells_a_changed_window_centre():
    """The comparison above can fail: intra-pooled queries placed one half-position off change the vectors."""
    model = tiny("tiny-tite-3-late").double()
    batch = ragged([27, 10, 4], 27)
    original = padded_tite.rotary_rows
    calls = []

    def queries_shifted(index, *args):  # _attention asks for the query rows first, then the key rows
        calls.append(None)
        return original(index + len(calls) % 2, *args)

    with torch.no_grad():
        planned = model(**batch)
        padded_tite.rotary_rows = queries_shifted
        try:
            shifted = padded_tite.padded_forward(model, **batch).pooler_output
        finally:
            padded_tite.rotary_rows = original
    assert (shifted - planned.pooler_output).abs().max() > 1e-6


def test_eager_calls_plan_and_traced_calls_do_not(monkeypatch):
    model = tiny("tiny-tite-2-late")
    batch = ragged([16, 3], 16)
    other = ragged([5, 2], 7, left=(1,), seed=3)  # another size than the traced example's

    def refuse(*args, **kwargs):
        raise AssertionError("the padded path ran in an eager call")

    monkeypatch.setattr(modeling_tite, "padded_forward", refuse)
    with torch.no_grad():
        expected = model(**other).pooler_output  # the planned, packed path: the default
    monkeypatch.undo()
    monkeypatch.setattr(TiteModel, "plan", lambda *args: pytest.fail("the forward planned while traced"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's warnings about Python values it records as constants
        traced = torch.jit.trace(model, (batch["input_ids"], batch["attention_mask"]), strict=False,
                                 check_trace=False)  # the check would rerun the model eagerly
    with torch.no_grad():
        got = traced(other["input_ids"], other["attention_mask"])["pooler_output"]
    torch.testing.assert_close(got, expected, atol=EXPORT_ATOL, rtol=0)


def test_exported_hidden_states_are_a_clear_error():
    model = tiny("tiny-tite-2-late")
    batch = ragged([16, 3], 16)
    batch.pop("token_type_ids")
    with pytest.raises(ValueError, match="not given by an exported TITE") as raised:
        torch.export.export(model, (), {**batch, "output_hidden_states": True})
    assert len(str(raised.value).splitlines()) == 1


# ---------------------------------------------------------------------------- torch.export


def dynamic_shapes(config: TiteConfig, names=("input_ids", "attention_mask")) -> dict:
    batch = torch.export.Dim("batch", max=1024)
    length = torch.export.Dim("length", max=config.max_position_embeddings)
    return {name: {0: batch, 1: length} for name in names}


@pytest.mark.slow
@pytest.mark.parametrize("name", PRESETS)
def test_torch_export_gives_the_eager_vectors(name):
    model = tiny(name)
    longest = model.config.max_position_embeddings
    example = ragged([longest, 4, 7], longest)
    example.pop("token_type_ids")
    program = torch.export.export(model, (), example, dynamic_shapes=dynamic_shapes(model.config))
    exported = program.module()
    for batch in batches(model.config):
        batch.pop("token_type_ids")
        with torch.no_grad():
            expected = model(**batch)
            got = exported(**batch)
        torch.testing.assert_close(got["pooler_output"], expected.pooler_output, atol=EXPORT_ATOL, rtol=0)
        if model.config.pools_to_one_vector:
            torch.testing.assert_close(got["last_hidden_state"], expected.last_hidden_state, atol=EXPORT_ATOL, rtol=0)


# ---------------------------------------------------------------------------- ONNX through onnxruntime


def onnxruntime_session(path):
    ort = pytest.importorskip("onnxruntime", reason='onnxruntime is in the test extra: pip install -e ".[test]"')
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def check_onnx(path, model: TiteModel, tok, config: TiteConfig):
    """The ONNX file's vectors on the texts in several batches (lengths mixed, padding on either side, some
    texts cut at the model's length) against the eager model's."""
    session = onnxruntime_session(path)
    longest = config.max_position_embeddings
    for texts, side in ((TEXTS, "right"), (TEXTS[2:3], "right"), (TEXTS[::-1][:3], "left")):
        tok.padding_side = side
        try:
            encoded = tok(texts, padding=True, truncation=True, max_length=longest, return_tensors="pt",
                          return_token_type_ids=False)
        finally:
            tok.padding_side = "right"
        vectors = session.run(["pooler_output"], {key: value.numpy() for key, value in encoded.items()})[0]
        with torch.no_grad():
            expected = model(**encoded).pooler_output
        assert len(set(encoded["attention_mask"].sum(1).tolist())) == len(texts)  # lengths differ
        torch.testing.assert_close(torch.from_numpy(vectors), expected, atol=EXPORT_ATOL, rtol=0)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:# The axis name:UserWarning")  # the exporter: both inputs share their axes
@pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated:FutureWarning")  # torch's own
@pytest.mark.parametrize("name", ["tiny-tite-2-late", "tiny-tite-2-staggered"])
def test_onnx_export_runs_in_onnxruntime_with_the_eager_vectors(name, tok, tmp_path):
    pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) writes through onnxscript: "
                        'pip install -e ".[test]"')
    model = tiny(name, vocab_size=len(tok))
    example = dict(tok(TEXTS[:2], padding=True, truncation=True, max_length=model.config.max_position_embeddings,
                       return_tensors="pt", return_token_type_ids=False))
    program = torch.onnx.export(model, (), kwargs=example, dynamo=True, dynamic_shapes=dynamic_shapes(model.config),
                                input_names=["input_ids", "attention_mask"],
                                output_names=["last_hidden_state", "pooler_output"], verbose=False)
    program.save(str(tmp_path / "tite.onnx"))
    check_onnx(tmp_path / "tite.onnx", model, tok, model.config)


@pytest.mark.slow
def test_legacy_onnx_export_traces_the_padded_path(tok, tmp_path):
    pytest.importorskip("onnx", reason='the legacy exporter needs onnx: pip install -e ".[test]"')
    model = tiny("tiny-tite-2-late", vocab_size=len(tok))
    example = tok(TEXTS[:2], padding=True, return_tensors="pt", return_token_type_ids=False)
    axes = {0: "batch", 1: "length"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's deprecation notice and the tracer's warnings
        torch.onnx.export(model, (example["input_ids"], example["attention_mask"]), str(tmp_path / "tite.onnx"),
                          dynamo=False, input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state", "pooler_output"],
                          dynamic_axes={"input_ids": axes, "attention_mask": axes})
    check_onnx(tmp_path / "tite.onnx", model, tok, model.config)


# ---------------------------------------------------------------------------- from a saved folder, without the package


@pytest.mark.slow
def test_exported_programs_and_saved_folders_need_no_package(tmp_path):
    """A program exported here loads and runs where the package is not installed (with torch and transformers,
    whose output class it returns), and a folder's remote code exports there too."""
    model = tiny("tiny-tite-2-staggered")
    folder = tmp_path / "tite"
    model.save_pretrained(folder)
    assert (folder / "padded_tite.py").is_file()
    example = ragged([16, 4, 9], 16)
    example.pop("token_type_ids")
    torch.export.save(torch.export.export(model, (), example, dynamic_shapes=dynamic_shapes(model.config)),
                      tmp_path / "installed.pt2")
    checked = batches(model.config)
    for batch in checked:
        batch.pop("token_type_ids")
    torch.save(checked, tmp_path / "batches.pt")
    code = f"""
import torch
import transformers.modeling_outputs  # the output class the programs return
from transformers import AutoModel
model = AutoModel.from_pretrained({str(folder)!r}, trust_remote_code=True).eval()
assert "transformers_modules" in type(model).__module__
example = {{"input_ids": torch.randint(1, {VOCAB}, (2, 16)), "attention_mask": torch.ones(2, 16, dtype=torch.long)}}
example["attention_mask"][1, 5:] = 0
batch, length = torch.export.Dim("batch"), torch.export.Dim("length", max=16)
shapes = {{name: {{0: batch, 1: length}} for name in example}}
programs = {{"remote code": torch.export.export(model, (), example, dynamic_shapes=shapes).module(),
            "installed": torch.export.load({str(tmp_path / "installed.pt2")!r}).module()}}
batches = torch.load({str(tmp_path / "batches.pt")!r})
vectors = {{name: [program(**batch)["pooler_output"] for batch in batches] for name, program in programs.items()}}
torch.save(vectors, {str(tmp_path / "vectors.pt")!r})
"""
    run_python_without_package(code, cwd=tmp_path)
    vectors = torch.load(tmp_path / "vectors.pt")
    for name in ("remote code", "installed"):
        for batch, got in zip(checked, vectors[name], strict=True):
            with torch.no_grad():
                expected = model(**batch).pooler_output
            torch.testing.assert_close(got, expected, atol=EXPORT_ATOL, rtol=0, msg=name)
