"""Encoding a whole corpus (or query set) into embedding shards, resumably, in bounded memory, on one or
many processes (the format is :mod:`dense_encoders.data.embedding_shards`).

The texts are read as a stream; a process holds one shard of texts and embeddings at a time. Under
``torchrun`` / ``accelerate launch`` (``WORLD_SIZE`` > 1) each rank encodes a contiguous slice of the shards
on its own device (``cuda:LOCAL_RANK``, else the CPU), and rank 0 writes the manifest after a barrier. On one
process, ``devices=["cuda:0", "cuda:1"]`` uses sentence-transformers' multi-process pool instead. A killed
run is continued by running it again: finished shards are skipped, and the shards it writes are the ones
an uninterrupted run would have written (same texts, same batches, same bytes). Running it again on a
finished folder verifies every shard against the manifest and encodes the missing or damaged ones again.

Within a shard the texts are encoded in order of their number of tokens (so batches carry little padding),
and the embeddings are put back in file order.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from ..data.embedding_shards import (
    DTYPES,
    FORMAT,
    MANIFEST_FILE,
    SETTINGS_FILE,
    VERSION,
    EmbeddingShards,
    differing_settings,
    ids_file,
    iterate_texts,
    read_record,
    scan_source,
    shard_count,
    shard_file,
    shard_is_complete,
    shard_rows,
    text_source,
    write_manifest,
    write_shard,
    written_shards,
)
from ..data.files import Flags, write_json
from ..data.run_lock import OutputDirLock
from ..vectors import AUTO_RUNTIME, RUNTIMES
from .batch_pipeline import encode_batches
from .encoding import RetrievalEncoder
from .runtimes import check_runtime, runtime_version

logger = logging.getLogger(__name__)

# texts tokenized in one call to count their tokens (token_counts)
TOKENIZED_AT_ONCE = 4096
# how a shard's texts are grouped into batches (_encode_sorted), recorded: the grouping decides the embeddings'
# last bits; folders written before the key was recorded were batched by characters
BATCH_ORDER = "tokens"
# how encode names its folder in the lock's refusal (it continues its own unfinished run, and deletes nothing)
ENCODE_FLAGS = Flags(output_dir="--output", overwrite="", resume=None)
# settings that decide the embeddings: a resume (or a search) must agree on all of them
IDENTITY = ("side", "fingerprint", "pooling_modules", "prompt", "max_length", "normalize", "dtype", "shard_size",
            "source_sha256", "count", "batch_order", "runtime")
# what a key of IDENTITY meant in folders written before it was recorded
IDENTITY_DEFAULTS = {"runtime": "torch"}


def distributed_context() -> tuple[int, int, int]:
    """``(rank, world size, local rank)`` from torchrun's environment; the process group is started (NCCL on
    CUDA, else Gloo) when there are several processes and none is running yet."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    if world > 1:
        if not dist.is_initialized():
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return rank, world, local


def _barrier(world: int) -> None:
    if world > 1:
        dist.barrier()


class _Failure:
    """An exception of rank 0 as it travels to the other ranks (its type and message; not every exception
    class can be rebuilt from its pickled arguments)."""

    def __init__(self, error: BaseException):
        self.error = error
        self.kind = FileNotFoundError if isinstance(error, FileNotFoundError) else ValueError
        self.message = str(error)

    def __getstate__(self):
        return {"kind": self.kind, "message": self.message, "error": None}


def _from_rank_zero(world: int, value):
    """Rank 0's ``value`` on every rank; a failure of rank 0 (:func:`_attempt`) is raised on every rank."""
    if world > 1:
        box = [value if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(box, src=0)
        value = box[0] if dist.get_rank() != 0 else value
    if isinstance(value, _Failure):
        if value.error is not None:
            raise value.error
        raise value.kind(value.message)
    return value


def my_shards(num_shards: int, rank: int, world: int) -> range:
    """The contiguous slice of shards rank ``rank`` of ``world`` encodes."""
    per_rank = -(-num_shards // world)
    return range(min(num_shards, rank * per_rank), min(num_shards, (rank + 1) * per_rank))


def identity(settings: dict) -> dict:
    """The settings of an encoding run that decide its embeddings (:data:`IDENTITY`): a run is continued only
    under the same ones."""
    return {key: settings.get(key, IDENTITY_DEFAULTS.get(key)) for key in IDENTITY}


def _prepare_folder(output: Path, settings: dict) -> list[str]:
    """Rank 0: a new folder gets ``encoding.json``; an existing run must have the same identity, and a finished
    one is verified (:func:`_reopen_damaged`). A run that wrote no shard (it failed before its first one) holds
    nothing to continue: its ``encoding.json`` is replaced by this run's. Returns the shards that this run must
    encode again."""
    recorded = read_record(output / SETTINGS_FILE)
    if recorded is None:
        if output.exists() and any(output.iterdir()):
            raise ValueError(f"{output} is not empty and holds no {SETTINGS_FILE}: choose a new --output (an "
                             "unfinished encode run is continued by giving its folder again)")
        output.mkdir(parents=True, exist_ok=True)
        write_json(output / SETTINGS_FILE, settings)
        return []
    differences = differing_settings(identity(recorded), identity(settings))
    if differences and not written_shards(output):
        logger.info("%s holds no shard of its earlier run (%s): starting it again with these settings", output,
                    "; ".join(differences[:4]))
        write_json(output / SETTINGS_FILE, settings)
        return []
    if recorded.get("batch_order") != settings["batch_order"]:
        raise ValueError(f"{output} was encoded by an earlier version, which batched the texts by characters: "
                         "its shards still serve search and evaluate, but this version cannot continue them bit for "
                         "bit; give a new --output")
    if differences:
        raise ValueError(f"{output} holds a run with other settings ({'; '.join(differences[:4])}): give the same "
                         "model, texts and flags to continue it, or a new --output")
    return _reopen_damaged(output) if (output / MANIFEST_FILE).is_file() else []


def _reopen_damaged(output: Path) -> list[str]:
    """Every shard of a finished folder verified against its manifest (size, sha256, ids); the damaged and
    missing ones are deleted, then the manifest, so that the run encodes them again (a run cut short in
    between still finds them damaged). Returns their file names."""
    shards = EmbeddingShards.open(output)
    damaged = [(index, problem) for index in range(len(shards)) if (problem := shards.damage(index)) is not None]
    for index, problem in damaged:
        logger.warning("%s %s: encoding it again", shard_file(output, index), problem)
        shard_file(output, index).unlink(missing_ok=True)
        ids_file(output, index).unlink(missing_ok=True)
    if damaged:
        (output / MANIFEST_FILE).unlink()
    return [shard_file(output, index).name for index, _ in damaged]


def encode_corpus(
    model,
    source: str | Path,
    output: str | Path,
    *,
    side: str = "document",
    shard_size: int = 100_000,
    dtype: str = "float16",
    batch_size: int = 32,
    prompt: str | None = None,
    max_length: int | None = None,
    pooling: str | None = None,
    normalize: bool = False,
    device: str | None = None,
    devices: list[str] | None = None,
    allow_empty: bool = False,
    allow_missing_weights: bool = False,
    trust_remote_code: bool = False,
    show_progress_bar: bool = True,
    revision: str | None = None,
    runtime: str = AUTO_RUNTIME,
) -> EmbeddingShards | None:
    """Encode the texts of ``source`` (BEIR folder, .jsonl, .tsv or .txt, each also .gz; or a Hub dataset id at
    ``revision``, whose repository and commit the manifest records) into shards in ``output``.

    Returns the finished :class:`EmbeddingShards` on rank 0 (None on the other ranks). Rank 0 holds the folder's
    lock (:class:`~dense_encoders.data.run_lock.OutputDirLock`) for the whole run: a second run into the same folder
    is refused in one line naming the first, whenever it starts. ``prompt`` and
    ``max_length`` default to the model's own for ``side`` (as :class:`RetrievalEncoder` reads them). A model
    that runs code of its own is refused unless ``trust_remote_code``. ``runtime`` runs the transformer in torch,
    OpenVINO or ONNX Runtime (:mod:`~dense_encoders.evaluation.runtimes`), or ``auto``: the fastest installed for
    this many texts (rank 0 chooses for every rank; :func:`~dense_encoders.evaluation.runtimes.choose_runtime});
    the texts, batches and shards are the same, and a run is continued only in the runtime it began in (``auto``
    continues it in that one).
    """
    if dtype not in DTYPES:
        raise ValueError(f"--dtype {dtype}: choose one of {sorted(DTYPES)}")
    if shard_size < 1:
        raise ValueError(f"--shard-size {shard_size}: must be at least 1")
    rank, world, local = distributed_context()
    if world > 1 and devices:
        raise ValueError("--devices starts one process per device itself: do not combine it with torchrun")
    check_runtime(runtime, device, devices)
    if device is None and world > 1:
        device = f"cuda:{local}" if torch.cuda.is_available() and runtime in ("torch", AUTO_RUNTIME) else "cpu"
    output = Path(output)
    # one run per folder: two runs started together would both find it new and write over each other's shards
    lock = _attempt(lambda: OutputDirLock(output, ENCODE_FLAGS).acquire()) if rank == 0 else None
    _from_rank_zero(world, lock if isinstance(lock, _Failure) else None)
    try:
        return _encode_locked(model, source, output, side=side, shard_size=shard_size, dtype=dtype,
                              batch_size=batch_size, prompt=prompt, max_length=max_length, pooling=pooling,
                              normalize=normalize, device=device, devices=devices, allow_empty=allow_empty,
                              allow_missing_weights=allow_missing_weights, trust_remote_code=trust_remote_code,
                              show_progress_bar=show_progress_bar, revision=revision, runtime=runtime,
                              rank=rank, world=world)
    finally:
        if lock is not None:
            lock.release()


def _encode_locked(model, source, output: Path, *, side, shard_size, dtype, batch_size, prompt, max_length, pooling,
                   normalize, device, devices, allow_empty, allow_missing_weights, trust_remote_code,
                   show_progress_bar, revision, runtime, rank, world) -> EmbeddingShards | None:
    """:func:`encode_corpus` once rank 0 holds the folder's lock."""
    texts = text_source(source, side, revision=revision)
    options = {f"{side}_prompt": prompt, f"{side}_max_length": max_length}
    # a local model by its absolute path, so that `search` finds it from any folder
    name = str(Path(model).resolve()) if isinstance(model, (str, Path)) and Path(model).exists() else None
    encoder = RetrievalEncoder(model, pooling=pooling, device=device, batch_size=batch_size, normalize=normalize,
                               show_progress_bar=False, allow_missing_weights=allow_missing_weights, name=name,
                               trust_remote_code=trust_remote_code, runtime=runtime, **options)
    scanned = _from_rank_zero(world, _attempt(lambda: scan_source(texts, allow_empty=allow_empty)) if rank == 0
                              else None)
    choice = None  # how --runtime auto chose (recorded; a continued run keeps the record of its beginning)
    if runtime == AUTO_RUNTIME:
        runtime, choice = _from_rank_zero(world, _attempt(lambda: _auto_runtime(encoder, output, scanned["count"],
                                                                                devices)) if rank == 0 else None)
        encoder.settle_runtime(scanned["count"], runtime=runtime)
    settings = {
        "format": FORMAT, "version": VERSION, "side": side, "model": encoder.name, "fingerprint": encoder.fingerprint,
        "pooling": pooling, "pooling_modules": encoder.settings()["modules"], "similarity": encoder.similarity,
        "prompt": encoder.prompts[side], "max_length": encoder.max_lengths[side], "normalize": normalize,
        "dtype": dtype, "shard_size": shard_size, "source": scanned, "source_sha256": scanned["sha256"],
        "count": scanned["count"], "allow_empty": allow_empty, "batch_order": BATCH_ORDER,
        "runtime": runtime, "runtime_version": runtime_version(runtime),
        **({"runtime_choice": choice} if choice else {}),
    }
    rebuilt = _from_rank_zero(world, _attempt(lambda: _prepare_folder(output, settings)) if rank == 0 else None)
    if (output / MANIFEST_FILE).is_file():
        logger.info("%s is complete already: every shard matches %s", output, MANIFEST_FILE)
        return EmbeddingShards.open(output) if rank == 0 else None
    count, num_shards = scanned["count"], shard_count(scanned["count"], shard_size)
    mine = my_shards(num_shards, rank, world)
    todo = [index for index in mine if not shard_is_complete(output, index, shard_rows(count, shard_size, index))]
    if len(todo) < len(mine):
        logger.info("rank %d: %d of its %d shards are done already", rank, len(mine) - len(todo), len(mine))
    if todo:
        _encode_shards(encoder, texts, output, todo, settings, devices=devices, allow_empty=allow_empty,
                       show_progress_bar=show_progress_bar and rank == 0)
    _barrier(world)
    result = _from_rank_zero(world, _attempt(lambda: write_manifest(output, settings, num_shards)) if rank == 0
                             else None)
    if rebuilt and rank == 0:
        logger.warning("rebuilt %s in %s", ", ".join(rebuilt), output)
    return result if rank == 0 else None


def _auto_runtime(encoder: RetrievalEncoder, output: Path, count: int, devices: list[str] | None
                  ) -> tuple[str, dict | None]:
    """Rank 0: the runtime ``--runtime auto`` encodes ``count`` texts into ``output`` with, and the record of the
    choice: the runtime an unfinished run there began in (it is continued only in that one; its record stays),
    torch for a multi-device pool, else the encoder's choice (:meth:`RetrievalEncoder.settle_runtime`)."""
    recorded = read_record(output / SETTINGS_FILE)
    if recorded is not None and written_shards(output):
        began_in = identity(recorded)["runtime"]
        if began_in in RUNTIMES:
            check_runtime(began_in)
            return encoder.settle_runtime(count, runtime=began_in), recorded.get("runtime_choice")
    if devices:
        return encoder.settle_runtime(count, runtime="torch"), {"chosen_by": AUTO_RUNTIME, "reason": (
            "torch: --devices runs sentence-transformers' multi-process pool, in torch")}
    runtime = encoder.settle_runtime(count)
    return runtime, encoder.runtime_choice.record() if encoder.runtime_choice else None


def _attempt(action):
    """``action()``, or the failure it raised (to be broadcast to the other ranks and raised everywhere)."""
    try:
        return action()
    except Exception as error:  # noqa: BLE001 - re-raised on every rank by _from_rank_zero
        return _Failure(error)


def _encode_shards(encoder: RetrievalEncoder, texts, output: Path, todo: list[int], settings: dict, *,
                   devices: list[str] | None, allow_empty: bool, show_progress_bar: bool) -> None:
    side, shard_size, count = settings["side"], settings["shard_size"], settings["count"]
    wanted, last = set(todo), max(todo)
    model = encoder.model
    previous_length = model.max_seq_length
    model.max_seq_length = settings["max_length"]
    pool = model.start_multi_process_pool(target_devices=list(devices)) if devices else None
    bar = tqdm(total=sum(shard_rows(count, shard_size, index) for index in todo), unit="text",
               desc=f"Encoding {side}s", disable=not show_progress_bar)
    try:
        batch_ids: list[str] = []
        batch_texts: list[str] = []
        current = None
        for position, (identifier, text) in enumerate(iterate_texts(texts, allow_empty=allow_empty)):
            index = position // shard_size
            if index > last:
                break
            if index not in wanted:
                continue
            current = index
            batch_ids.append(identifier)
            batch_texts.append(text)
            if len(batch_ids) == shard_rows(count, shard_size, index):
                embeddings = _encode_sorted(encoder, side, batch_texts, settings, pool, bar)
                write_shard(output, index, embeddings, batch_ids, settings["dtype"])
                batch_ids, batch_texts, current = [], [], None
        if current is not None:
            raise ValueError(f"{texts.path} changed while it was being encoded: shard {current} is short")
    finally:
        bar.close()
        if pool is not None:
            model.stop_multi_process_pool(pool)
        model.max_seq_length = previous_length


def token_counts(model, texts: list[str], prompt: str | None, max_length: int) -> np.ndarray:
    """Each text's number of tokens as ``model`` (a SentenceTransformer) sees it: ``prompt`` prepended, truncated
    at ``max_length``, special tokens included. The key the texts are batched by; a model whose first module has
    no text tokenizer gives the texts' characters instead (sentence-transformers' own key)."""
    tokenizer = getattr(model, "tokenizer", None)
    if callable(tokenizer):
        counts = np.empty(len(texts), dtype=np.int64)
        try:
            for start in range(0, len(texts), TOKENIZED_AT_ONCE):
                part = [(prompt or "") + text for text in texts[start : start + TOKENIZED_AT_ONCE]]
                ids = tokenizer(part, truncation=True, max_length=max_length, return_attention_mask=False,
                                return_token_type_ids=False)["input_ids"]
                counts[start : start + len(part)] = [len(row) for row in ids]
            return counts
        except (TypeError, KeyError, ValueError):  # not a text tokenizer (an image processor, ...)
            pass
    return np.array([len(text) for text in texts], dtype=np.int64)


def _encode_sorted(encoder: RetrievalEncoder, side: str, texts: list[str], settings: dict, pool, bar) -> np.ndarray:
    """One shard's embeddings in file order. The texts are sorted by their number of tokens (longest first, ties
    in file order; :func:`token_counts`) and cut into batches of ``encoder.batch_size``, so a batch is padded to
    little more than its texts. On one device the batches go through :func:`~.batch_pipeline.encode_batches`
    (sentence-transformers' steps, with the next batches tokenized while the device computes); sentence-transformers'
    ``encode`` would otherwise regroup the texts by characters (28 % more padded tokens on 5,000 MS MARCO passages
    in batches of 32) and tokenize while the device waits. With a multi-process ``pool``, 16 batches go at a time to
    ``encode``."""
    model = encoder.model
    order = np.argsort(-token_counts(model, texts, settings["prompt"], settings["max_length"]), kind="stable")
    batches = [order[start : start + encoder.batch_size] for start in range(0, len(order), encoder.batch_size)]
    embeddings = None
    if pool is None:
        vectors_of = encode_batches(model, ([texts[position] for position in rows] for rows in batches),
                                    prompt=settings["prompt"], task=side, normalize=settings["normalize"])
    else:
        encode = model.encode_query if side == "query" else model.encode_document
        groups = [np.concatenate(batches[start : start + 16]) for start in range(0, len(batches), 16)]
        batches = groups
        vectors_of = (encode([texts[position] for position in rows], prompt=settings["prompt"],
                             batch_size=encoder.batch_size, show_progress_bar=False, convert_to_numpy=True,
                             normalize_embeddings=settings["normalize"], pool=pool) for rows in groups)
    for vectors, rows in zip(vectors_of, batches):
        if embeddings is None:
            embeddings = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
        embeddings[rows] = vectors
        bar.update(len(rows))
    return embeddings


__all__ = ["IDENTITY", "distributed_context", "identity", "encode_corpus", "my_shards", "token_counts"]
