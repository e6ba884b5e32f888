"""The README's first command, at reduced training length: teacher, two students, table, cards, caches."""

from __future__ import annotations

import json

import pytest
from huggingface_hub import ModelCard

from dense_encoders.data.retrieval import load_beir
from dense_encoders.quickstart import default_data, format_summary, run_quickstart


def test_bundled_retrieval_set():
    train, test = load_beir(default_data(), "train"), load_beir(default_data(), "test")
    assert len(train.corpus) == len(test.corpus) == 240
    assert len(train.queries) == 200 and len(test.queries) == 100
    assert not set(train.queries) & set(test.queries)


@pytest.mark.slow
def test_quickstart_end_to_end_and_reuse(tmp_path, capsys, monkeypatch):
    summary = run_quickstart(output_dir=tmp_path, epochs=0.1, batch_size=8, candidates=10)
    printed = capsys.readouterr().out
    assert format_summary(summary).splitlines()[0] in printed
    names = list(summary["models"])
    assert len(names) == 3 and "teacher" in names[0] and "TITE" in names[1] and "2 teacher layers" in names[2]
    teacher, tite, shallow = (summary["models"][n] for n in names)
    assert teacher["ndcg@10"] > 0.8  # all-MiniLM-L6-v2 on the bundled set (an easy one)
    assert teacher["layers"] == 6 and tite["layers"] == 6 and shallow["layers"] == 2
    assert teacher["speedup"] == pytest.approx(1.0)
    # measured side by side and reported; how large is the benchmarks' business (a busy machine shrinks it)
    assert shallow["speedup"] > 0 and tite["speedup"] > 0
    assert all(f"{model['speedup']:.2f}" in printed for model in (tite, shallow))
    for name in names[1:]:
        folder = tmp_path / summary["models"][name]["path"].split("/")[-1]
        assert ({"model.safetensors", "modules.json", "README.md", "tokenizer.json"}
                <= {p.name for p in folder.iterdir()})
        card = ModelCard.load(folder / "README.md")
        assert card.data.eval_results and "## Results" in card.text
    assert "modeling_tite.py" in {p.name for p in (tmp_path / "tite-student").iterdir()}
    # a second run trains nothing and encodes the teacher's texts from the cache
    from dense_encoders import quickstart as module

    def no_training(*args, **kwargs):
        raise AssertionError("retrained although the students were cached")

    monkeypatch.setattr("dense_encoders.trainer.distillation.distill", no_training)
    again = module.run_quickstart(output_dir=tmp_path, epochs=0.1, batch_size=8, candidates=10)
    assert [r["ndcg@10"] for r in again["models"].values()] == [r["ndcg@10"] for r in summary["models"].values()]
    assert json.loads((tmp_path / "summary.json").read_text())["models"].keys() == summary["models"].keys()
