"""Saved folders load where dense_encoders is NOT importable: remote code and sentence-transformers."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import float32_atol, run_python_without_package, tiny_condenser_config
from transformers import AutoTokenizer

from dense_encoders import CoCondenserForPreTraining, CondenserModel
from dense_encoders.checkpoints.folder import write_sentence_transformers_files
from dense_encoders.tokenization import bundled_tokenizer_path

SENTENCES = ["dense retrieval with a single vector", "the condenser head reads the late CLS vector"]


@pytest.fixture
def saved_cocondenser(tmp_path):
    """A coCondenser checkpoint as ``pretrain`` writes it: weights, code, tokenizer, ST files."""
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(bundled_tokenizer_path())
    model = CoCondenserForPreTraining(tiny_condenser_config(vocab_size=len(tokenizer)))
    folder = tmp_path / "cocondenser"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    write_sentence_transformers_files(folder, pooling="cls", similarity="dot")
    model.eval()
    with torch.no_grad():
        expected = model.bert(**tokenizer(SENTENCES, padding=True, return_tensors="pt")).pooler_output
    torch.save(expected, tmp_path / "expected.pt")
    return folder, expected


def test_folder_carries_code_auto_map_and_sentence_transformers_files(saved_cocondenser):
    folder, _ = saved_cocondenser
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"] == {
        "AutoConfig": "configuration_condenser.CondenserConfig",
        "AutoModel": "modeling_condenser.CondenserModel",
        "AutoModelForPreTraining": "modeling_condenser.CoCondenserForPreTraining",
    }
    assert (folder / "modeling_condenser.py").is_file() and (folder / "configuration_condenser.py").is_file()
    for name in ("modeling_condenser.py", "configuration_condenser.py"):
        assert "dense_encoders" not in "\n".join(
            line for line in (folder / name).read_text().splitlines() if line.startswith(("import", "from"))
        )
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_cls_token"] is True and pooling["pooling_mode_mean_tokens"] is False
    assert json.loads((folder / "config_sentence_transformers.json").read_text())["similarity_fn_name"] == "dot"


@pytest.mark.numerics
@pytest.mark.slow
def test_auto_classes_and_sentence_transformers_load_without_the_package(saved_cocondenser, tmp_path):
    folder, expected = saved_cocondenser
    code = f"""
import json, torch
try:
    import dense_encoders
    raise SystemExit("the package should not be importable here")
except ImportError:
    pass
from transformers import AutoModel, AutoModelForPreTraining, AutoTokenizer
from sentence_transformers import SentenceTransformer
folder = {str(folder)!r}
sentences = {SENTENCES!r}
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
encoder = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
pretraining = AutoModelForPreTraining.from_pretrained(folder, trust_remote_code=True)
with torch.no_grad():
    cls = encoder(**tokenizer(sentences, padding=True, return_tensors="pt")).pooler_output
st = SentenceTransformer(folder, trust_remote_code=True, device="cpu")
st_vectors = st.encode(sentences, convert_to_tensor=True)
torch.save({{"cls": cls, "st": st_vectors.cpu()}}, {str(tmp_path / "remote.pt")!r})
print("RESULT " + json.dumps({{"encoder": type(encoder).__name__, "pretraining": type(pretraining).__name__,
                  "module": type(encoder).__module__}}))
"""
    result = run_python_without_package(code, cwd=tmp_path)
    assert "Do you wish to run the custom code" not in result.stdout + result.stderr
    lines = [line[7:] for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, result.stdout + result.stderr[-3000:]
    info = json.loads(lines[-1])
    assert info["encoder"] == "CondenserModel" and info["pretraining"] == "CoCondenserForPreTraining"
    assert "transformers_modules" in info["module"]  # the copied remote code, not our package
    remote = torch.load(tmp_path / "remote.pt")
    # float32 in another process (the same code, its own kernels and threads): k * eps32 * max|CLS| * sqrt(4 layers)
    atol = float32_atol(expected, depth=4)
    torch.testing.assert_close(remote["cls"], expected, atol=atol, rtol=0)
    torch.testing.assert_close(remote["st"], expected, atol=atol, rtol=0)


@pytest.mark.numerics
def test_sentence_transformers_in_process_gives_the_cls_embedding(saved_cocondenser):
    from sentence_transformers import SentenceTransformer

    folder, expected = saved_cocondenser
    model = SentenceTransformer(str(folder), trust_remote_code=True, device="cpu")
    torch.testing.assert_close(model.encode(SENTENCES, convert_to_tensor=True).cpu(), expected, atol=1e-5, rtol=0)
    assert model.similarity_fn_name == "dot"


def test_writing_sentence_transformers_files_keeps_the_head(saved_cocondenser):
    folder, _ = saved_cocondenser
    reloaded = CoCondenserForPreTraining.from_pretrained(folder)
    assert len(reloaded.c_head) == 2
    assert type(CondenserModel.from_pretrained(folder)) is CondenserModel


def test_writing_sentence_transformers_files_needs_a_saved_model(tmp_path):
    with pytest.raises(FileNotFoundError, match="save_pretrained"):
        write_sentence_transformers_files(tmp_path, pooling="cls", similarity="dot")
