"""Sentence-transformers files for a saved checkpoint folder, so no pooling guesswork happens.

Users of the reference Condenser checkpoints loaded them with ``SentenceTransformer`` and silently
got mean pooling; our folders declare their pooling (CLS for Condenser) explicitly.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

# What sentence-transformers writes besides the model itself (weights, config, tokenizer, code).
_SENTENCE_TRANSFORMERS_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")


def native_pooling(config) -> str:
    """The sentence-transformers pooling that reproduces one of our models' ``pooler_output``:
    [CLS] for Condenser and TITE (whose single vector sits at position 0), the configured pooling
    (mean by default) for cross-encoder-infused dual encoders."""
    if config.model_type == "infused_dual_encoder":
        return config.pooling
    return "cls"


def write_sentence_transformers_files(
    folder: str | Path,
    *,
    pooling: str = "cls",
    similarity: str = "dot",
    prompts: dict[str, str] | None = None,
    normalize: bool = False,
) -> list[Path]:
    """Add sentence-transformers' module files to a ``save_pretrained`` folder (with tokenizer).

    The files are produced by sentence-transformers itself (a ``Transformer`` + ``Pooling``
    pipeline saved to a scratch folder), then only the pipeline description is copied: the
    checkpoint's own weights, config and remote code stay untouched. ``normalize`` appends
    sentence-transformers' ``Normalize`` (unit vectors, as cosine-trained models ship). Returns the
    written paths.
    """
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules.transformer import Transformer
    from sentence_transformers.sentence_transformer.modules.pooling import Pooling

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} has no config.json: call model.save_pretrained({str(folder)!r}) first.")
    remote = {"trust_remote_code": True}
    transformer = Transformer(str(folder), model_kwargs=remote, config_kwargs=remote, processor_kwargs=remote)
    modules = [transformer, Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling)]
    if normalize:
        from sentence_transformers.sentence_transformer.modules import Normalize

        modules.append(Normalize())
    pipeline = SentenceTransformer(
        modules=modules,
        similarity_fn_name=similarity,
        prompts=prompts,
    )
    written = []
    with tempfile.TemporaryDirectory() as scratch:
        pipeline.save(scratch)
        for name in _SENTENCE_TRANSFORMERS_FILES:
            shutil.copyfile(Path(scratch) / name, folder / name)
            written.append(folder / name)
        for module_dir in sorted(p for p in Path(scratch).glob("[1-9]_*") if p.is_dir()):
            shutil.copytree(module_dir, folder / module_dir.name, dirs_exist_ok=True)
            written.append(folder / module_dir.name)
    return written
