"""Encoding batches with the tokenizer and the device working at the same time.

``SentenceTransformer.encode`` runs each batch in turn: tokenize on the CPU, copy to the device from pageable
memory, forward, and copy the vectors back with ``.cpu()``, which waits for the device. On a GPU the device then
idles while the next batch is tokenized, and the host idles while the device computes; once the forward is fast
(TITE), tokenization is most of a batch's time.

:func:`encode_batches` keeps sentence-transformers' own steps and their results (``model.preprocess`` with the
prompt and task, ``model(features)``, the ``sentence_embedding`` output, ``truncate_dim``, L2 normalisation), in
another arrangement:

- a worker thread tokenizes up to :data:`TOKENIZED_AHEAD` batches ahead (the fast tokenizers run in Rust without
  the GIL) into page-locked memory;
- the inputs go to the device asynchronously, the vectors come back asynchronously into page-locked memory, and
  the host waits for a batch's vectors only once :data:`IN_FLIGHT` later batches are queued behind it, so the
  device always has queued work;
- a model whose forward takes the attention mask on the host (``host_attention_mask = True`` on the transformers
  model, as TITE declares: it plans the batch from the mask and then reads nothing from the device) gets the
  mask as a CPU tensor, so the forward never waits for the device either.

On the CPU the same arrangement runs (the tokenizer thread overlaps the forward's own threads), with nothing to
pin or copy.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F

# batches tokenized ahead of the one on the device (the worker blocks beyond that: bounded memory)
TOKENIZED_AHEAD = 4
# batches queued on the device before the host waits for the oldest one's vectors
IN_FLIGHT = 2


def _transformer_model(model):
    """The transformers model inside ``model``'s first module (sentence-transformers' ``Transformer``), or None."""
    try:
        first = model[0]
    except (TypeError, IndexError, KeyError):
        return None
    return getattr(first, "auto_model", None) or getattr(first, "model", None)


def takes_host_attention_mask(model) -> bool:
    """Whether ``model``'s transformer plans its batches from an attention mask left on the host
    (``host_attention_mask = True``): its forward then reads nothing from the device."""
    return bool(getattr(_transformer_model(model), "host_attention_mask", False))


class _Stop:
    """The end of the worker's stream, or the error it met."""

    def __init__(self, error: BaseException | None = None):
        self.error = error


def _put(out: queue.Queue, item, stop: threading.Event) -> bool:
    """Put ``item`` into ``out`` unless the consumer stops first (it may have stopped reading: an interrupt, an early
    end); whether it was put."""
    while not stop.is_set():
        try:
            out.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def _tokenize_ahead(model, batches: Iterable[Sequence[str]], prompt: str | None, task: str | None, pin: bool,
                    out: queue.Queue, stop: threading.Event) -> None:
    """The worker: ``model.preprocess`` of every batch (pinned when ``pin``), put into ``out`` in order. Every put
    gives way to ``stop``, so the consumer's ``join`` never waits on a queue it no longer reads."""
    try:
        for texts in batches:
            features = model.preprocess(list(texts), prompt=prompt, **({"task": task} if task else {}))
            if pin:
                features = {key: value.pin_memory() if isinstance(value, torch.Tensor) else value
                            for key, value in features.items()}
            if not _put(out, (len(texts), features), stop):
                return
        _put(out, _Stop(), stop)
    except BaseException as error:  # noqa: BLE001 - raised again in the caller's thread
        _put(out, _Stop(error), stop)


def encode_batches(model, batches: Iterable[Sequence[str]], *, prompt: str | None = None, task: str | None = None,
                   normalize: bool = False) -> Iterator[np.ndarray]:
    """The ``(len(batch), dimension)`` float32 vectors of each batch of texts, in order: what
    ``model.encode(batch, prompt=prompt, task=task, normalize_embeddings=normalize, convert_to_numpy=True)`` gives
    for each batch on its own (``model``: a ``SentenceTransformer``), with tokenization, transfers and the forward
    overlapped (the module's docstring). ``task``: ``"query"`` or ``"document"``, as ``encode_query`` /
    ``encode_document`` set it."""
    device = torch.device(model.device)
    cuda = device.type == "cuda"
    host_mask = cuda and takes_host_attention_mask(model)
    ready: queue.Queue = queue.Queue(maxsize=TOKENIZED_AHEAD)
    stop = threading.Event()
    worker = threading.Thread(target=_tokenize_ahead, args=(model, batches, prompt or None, task, cuda, ready, stop),
                              name="dense-encoders-tokenizer", daemon=True)
    pending: deque = deque()  # (host vectors, event) of batches whose vectors are on their way back
    model.eval()
    worker.start()
    try:
        while True:
            item = ready.get()
            if isinstance(item, _Stop):
                if item.error is not None:
                    raise item.error
                break
            _, features = item
            vectors = _forward(model, features, device, host_mask, task, normalize)
            if cuda:
                host = torch.empty(vectors.shape, dtype=vectors.dtype, pin_memory=True)
                host.copy_(vectors, non_blocking=True)
                event = torch.cuda.Event()
                event.record()
                pending.append((host, event))
                while len(pending) > IN_FLIGHT:
                    yield _finished(*pending.popleft())
            else:
                yield vectors.numpy()
        while pending:
            yield _finished(*pending.popleft())
    finally:
        stop.set()
        worker.join()


def _forward(model, features: dict, device: torch.device, host_mask: bool, task: str | None,
             normalize: bool) -> torch.Tensor:
    """The batch's sentence embeddings on the device, float32 (sentence-transformers' ``_inference`` steps)."""
    moved = {}
    for key, value in features.items():
        keep = host_mask and key == "attention_mask" and value.dim() == 2 and value.shape[1] > 1
        if isinstance(value, torch.Tensor) and not keep:
            value = value.to(device, non_blocking=True)
        moved[key] = value
    with torch.inference_mode():
        embeddings = model(moved, **({"task": task} if task else {}))["sentence_embedding"]
        if model.truncate_dim is not None:
            embeddings = embeddings[..., : model.truncate_dim]
        if normalize:
            embeddings = F.normalize(embeddings, p=2, dim=1)
        return embeddings.float()


def _finished(host: torch.Tensor, event) -> np.ndarray:
    event.synchronize()
    return host.numpy()


__all__ = ["IN_FLIGHT", "TOKENIZED_AHEAD", "encode_batches", "takes_host_attention_mask"]
