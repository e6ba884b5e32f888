"""CUDA graphs of a TITE encoder's layers (inference): one capture per static-shape bucket, then replays.

A graph replays fixed shapes and fixed device addresses. A batch is therefore planned at the static
capacity of its bucket (``plan_tite.TitePlan`` with ``capacity``: texts, packed tokens and longest
text, each rounded up), its plan's index arrays are copied into the device buffer the captured plan
reads, its token embeddings into the captured input rows, and the graph is replayed. Every layer
runs on packed rows (varlen flash attention, Triton pooling and rotary kernels), so nothing in the
captured layers depends on the batch beyond those arrays.

Shipped as remote code next to every checkpoint: imports ``torch`` absolutely, its sibling files
relatively, nothing from ``dense_encoders``.
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from .plan_tite import TitePlan

MAX_GRAPHS = 16  # captured buckets kept per model; the least recently replayed one goes first


def capacity_bucket(value: int, minimum: int) -> int:
    """Round up to a multiple of an eighth of the power of two below (at most 12.5 % waste)."""
    value = max(value, minimum)
    step = max(1, (1 << (value.bit_length() - 1)) // 8)
    return -(-value // step) * step


def static_capacity(lengths: torch.Tensor, max_position_embeddings: int) -> tuple[int, int, int]:
    """The bucket ``(texts, tokens, longest text)`` of a batch of host ``lengths``: texts and tokens
    by :func:`capacity_bucket`, the longest text by the next power of two (within the schedule)."""
    batch, tokens, longest = int(lengths.numel()), int(lengths.sum()), int(lengths.max())
    longest_bucket = min(1 << max(longest - 1, 1).bit_length(), max_position_embeddings)
    return capacity_bucket(batch, 8), capacity_bucket(tokens, 256), longest_bucket


class CudaGraphs:
    """The captured layer graphs of one TITE encoder, keyed by ``(device, dtype, capacity)``."""

    def __init__(self):
        self._entries: OrderedDict = OrderedDict()
        self._pool = None  # one memory pool shared by every graph of the model

    def __len__(self) -> int:
        return len(self._entries)

    def run(self, encoder, input_ids, attention_mask, token_type_ids, dtype: torch.dtype) -> torch.Tensor:
        """``encoder``'s layers on the batch as graph replays (captured first for a new bucket); returns
        the ``(batch, hidden)`` vectors. ``encoder``: a ``TiteModel`` (its config, embeddings and layers).

        The plan is staged (``TitePlan(staged=True)``): the unpooled opening layers are one graph, the pooled
        layers another, and the pooled layers are planned on the host while the device replays the first."""
        device = input_ids.device
        host_mask = attention_mask.detach().to("cpu") if attention_mask is not None else None  # the one sync
        lengths = host_mask.sum(-1) if host_mask is not None else torch.full((input_ids.shape[0],), input_ids.shape[1])
        batch, tokens = int(lengths.numel()), int(lengths.sum())
        capacity = static_capacity(lengths, encoder.config.max_position_embeddings)
        key = (device, dtype, capacity)
        entry = self._entries.get(key)
        plan = TitePlan(encoder.config, host_mask, tuple(input_ids.shape), device, True, dtype, capacity,
                        into=entry["plan"] if entry else None, staged=True)
        flat_ids = input_ids.reshape(-1).index_select(0, plan.gather[:tokens])
        types = None
        if token_type_ids is not None and encoder.embeddings.token_type_embeddings is not None:
            types = token_type_ids.reshape(-1).index_select(0, plan.gather[:tokens])
        states = encoder.embeddings(flat_ids, plan.positions[:tokens], types)
        if entry is None:
            entry = self._entries[key] = self._capture(encoder.layers, plan, states, capacity[1])
            while len(self._entries) > MAX_GRAPHS:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(key)
            entry["input"][:tokens].copy_(states)
        for (start, _), graph in zip(entry["segments"], entry["graphs"]):
            plan.layer(start)  # the pooled layers' plan, made while the device replays the opening layers
            graph.replay()
        return entry["output"][:batch].clone()  # the static output is overwritten by the next replay

    def _capture(self, layers, plan: TitePlan, states: torch.Tensor, rows: int) -> dict:
        """Capture ``layers`` over ``rows`` static input rows, the first of which hold ``states``: one graph for
        the opening layers and one for the rest when the plan is staged, else one."""
        device = states.device
        static_in = states.new_zeros((rows, states.shape[1]))
        static_in[: states.shape[0]].copy_(states)
        plan_layers = plan.layers  # the whole plan: both graphs are captured now
        count = len(plan_layers)
        segments = [(0, plan.opening), (plan.opening, count)] if plan.staged else [(0, count)]

        def run_layers(hidden, start, stop):
            for layer, layer_plan in zip(layers[start:stop], plan_layers[start:stop]):
                hidden = layer(hidden, layer_plan)
            return hidden

        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            run_layers(static_in, 0, count)  # warm-up outside the capture: kernels compiled, workspaces allocated
        torch.cuda.current_stream(device).wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graphs, outputs = [], [static_in]
        for start, stop in segments:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                outputs.append(run_layers(outputs[-1], start, stop))
            graphs.append(graph)
        # every segment's static output stays referenced: the second graph reads the first's from its memory
        return {"plan": plan, "graphs": graphs, "segments": segments, "input": static_in, "outputs": outputs,
                "output": outputs[-1]}


__all__ = ["CudaGraphs", "capacity_bucket", "static_capacity", "MAX_GRAPHS"]
