"""The README's first command: an offline end-to-end run on the bundled corpus."""

from __future__ import annotations

import time
from pathlib import Path

import torch

SENTENCES = [
    "Dense retrieval encodes queries and passages into single vectors.",
    "A Condenser pre-trains the CLS vector to summarise the whole passage.",
]


def run_quickstart(output_dir: str | Path = "quickstart-output", max_steps: int = 100, seed: int = 42) -> dict:
    """Pre-train a tiny Condenser for ``max_steps`` steps, save it, reload it two ways, encode.

    Returns a summary dict (also printed): losses, tokens/s, the saved folder and the
    similarity of the two example sentences under ``AutoModel`` and ``SentenceTransformer``.
    """
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    from .trainer.pretraining import PreTrainingArguments, PreTrainingSetup, pretrain

    output_dir = Path(output_dir) / "condenser-tiny"
    setup = PreTrainingSetup(architecture="condenser", preset="tiny", max_seq_length=128)
    args = PreTrainingArguments(
        output_dir=str(output_dir),
        max_steps=max_steps,
        per_device_train_batch_size=16,
        logging_steps=max(1, max_steps // 10),
        save_strategy="no",
        seed=seed,
        learning_rate=5e-4,
        use_cpu=not torch.cuda.is_available(),
        disable_tqdm=False,
    )
    started = time.perf_counter()
    pretrain(setup, args)
    seconds = time.perf_counter() - started

    # Reload as a user would: remote code through the Auto classes, and sentence-transformers.
    tokenizer = AutoTokenizer.from_pretrained(output_dir, trust_remote_code=True)
    encoder = AutoModel.from_pretrained(output_dir, trust_remote_code=True).eval()
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        cls_vectors = encoder(**batch).pooler_output
    st_model = SentenceTransformer(str(output_dir), trust_remote_code=True, device="cpu")
    st_vectors = st_model.encode(SENTENCES, convert_to_tensor=True)
    summary = {
        "saved_to": str(output_dir),
        "train_seconds": round(seconds, 1),
        "first_logged_loss": _logged(output_dir, "loss")[0],
        "last_logged_loss": _logged(output_dir, "loss")[-1],
        "encoder_class": type(encoder).__name__,
        "embedding_shape": list(cls_vectors.shape),
        "dot_similarity": round(float(cls_vectors[0] @ cls_vectors[1]), 4),
        "sentence_transformers_matches_cls": bool(torch.allclose(st_vectors.cpu(), cls_vectors, atol=1e-5)),
    }
    width = max(len(k) for k in summary)
    print("\nquickstart summary")
    for key, value in summary.items():
        print(f"  {key:<{width}}  {value}")
    return summary


def _logged(folder: Path, key: str) -> list:
    import json

    history = json.loads((folder / "trainer_state.json").read_text()).get("log_history", [])
    return [entry[key] for entry in history if key in entry] or [None]
