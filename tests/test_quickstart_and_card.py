"""The README's main job (quickstart) end to end, and the card it writes."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard

from dense_encoders.hub.cards import condenser_model_card
from dense_encoders.quickstart import SENTENCES


def _pretrain_tiny_condenser(output_dir: str | Path = "pretraining-demo", max_steps: int = 100, seed: int = 42) -> dict:
    """Pre-train a tiny Condenser for ``max_steps`` steps on the bundled corpus, save it, reload it two
    ways (AutoModel with remote code, SentenceTransformer) and encode two sentences."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    from dense_encoders.trainer.pretraining import PreTrainingArguments, PreTrainingSetup, pretrain

    output_dir = Path(output_dir) / "condenser-tiny"
    setup = PreTrainingSetup(architecture="condenser", preset="tiny", max_seq_length=128)
    args = PreTrainingArguments(
        output_dir=str(output_dir), max_steps=max_steps, per_device_train_batch_size=16,
        logging_steps=max(1, max_steps // 10), save_strategy="no", seed=seed, learning_rate=5e-4,
        use_cpu=not torch.cuda.is_available(), disable_tqdm=False,
    )
    started = time.perf_counter()
    pretrain(setup, args)
    seconds = time.perf_counter() - started
    tokenizer = AutoTokenizer.from_pretrained(output_dir, trust_remote_code=True)
    encoder = AutoModel.from_pretrained(output_dir, trust_remote_code=True).eval()
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        cls_vectors = encoder(**batch).pooler_output
    st_vectors = SentenceTransformer(str(output_dir), trust_remote_code=True, device="cpu").encode(
        SENTENCES, convert_to_tensor=True)
    history = json.loads((output_dir / "trainer_state.json").read_text()).get("log_history", [])
    losses = [entry["loss"] for entry in history if "loss" in entry] or [None]
    return {
        "saved_to": str(output_dir),
        "train_seconds": round(seconds, 1),
        "first_logged_loss": losses[0],
        "last_logged_loss": losses[-1],
        "encoder_class": type(encoder).__name__,
        "embedding_shape": list(cls_vectors.shape),
        "dot_similarity": round(float(cls_vectors[0] @ cls_vectors[1]), 4),
        "sentence_transformers_matches_cls": bool(torch.allclose(st_vectors.cpu(), cls_vectors, atol=1e-5)),
    }


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    output = tmp_path_factory.mktemp("quickstart")
    summary = _pretrain_tiny_condenser(output_dir=output, max_steps=8, seed=3)
    return output / "condenser-tiny", summary


def test_quickstart_trains_saves_and_reloads(quickstart):
    folder, summary = quickstart
    assert summary["sentence_transformers_matches_cls"] is True
    assert summary["embedding_shape"] == [2, 64]
    assert summary["encoder_class"] == "CondenserModel"
    state = json.loads((folder / "trainer_state.json").read_text())
    assert state["global_step"] == 8
    # the bundled corpus was used: 240 documents tokenized into blocks
    assert (folder / "pretraining_setup.json").is_file()
    for name in ("model.safetensors", "modeling_condenser.py", "modules.json", "README.md", "tokenizer.json"):
        assert (folder / name).exists(), name


def test_card_metadata_and_facts_come_from_the_folder(quickstart):
    folder, _ = quickstart
    card = ModelCard.load(folder / "README.md")
    assert card.data.library_name == "sentence-transformers"  # the folder carries modules.json
    assert card.data.pipeline_tag == "sentence-similarity"
    assert {"condenser", "sentence-transformers"} <= set(card.data.tags)
    assert card.data.base_model is None  # trained from scratch: nothing to cite, nothing invented
    state = json.loads((folder / "trainer_state.json").read_text())
    assert f"optimizer steps: {state['global_step']}" in card.text
    assert "4 layers, hidden size 64" in card.text and "layer 2" in card.text
    assert "gao-callan-2021-condenser" in card.text and "gao-callan-2022" not in card.text


@pytest.mark.numerics
def test_card_usage_snippets_run(quickstart):
    folder, _ = quickstart
    card = condenser_model_card(folder, repo_id=str(folder))
    snippets = re.findall(r"```python\n(.*?)```", card.text, flags=re.S)
    assert len(snippets) == 2
    results = []
    for snippet in snippets:
        namespace: dict = {}
        exec(snippet, namespace)  # noqa: S102 - our own generated usage code
        results.append(torch.as_tensor(namespace["embeddings"]).detach())
    torch.testing.assert_close(results[0], results[1], atol=1e-5, rtol=0)
    assert SENTENCES  # the module's example sentences stay importable for the README


def test_card_rejects_other_architectures(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["BertModel"]}))
    with pytest.raises(ValueError, match="BertModel"):
        condenser_model_card(tmp_path)
