"""The README's main job (quickstart) end to end, and the card it writes."""

from __future__ import annotations

import json
import re

import pytest
import torch
from huggingface_hub import ModelCard

from dense_encoders.hub_cards import condenser_model_card
from dense_encoders.quickstart import SENTENCES, run_pretraining_demo


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    output = tmp_path_factory.mktemp("quickstart")
    summary = run_pretraining_demo(output_dir=output, max_steps=8, seed=3)
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
    assert card.data.pipeline_tag == "feature-extraction"
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
