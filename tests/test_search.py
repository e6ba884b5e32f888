"""Tests for the search backends (dense_encoders.evaluation.backends) and their entry points in
dense_encoders.evaluation.search: exact/faiss top-k search, the registry and topk_to_run."""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from dense_encoders.evaluation.backends.base import SearchBackend
from dense_encoders.evaluation.search import RunningTopK, exact_search, faiss_search, search, topk_to_run

# The package re-exports the `search` function, which shadows the submodule attribute of the same
# name, so fetch the module object itself.
search_module = importlib.import_module("dense_encoders.evaluation.search")
# The exact backend scores every block through `score_block`, as its module imported it.
exact_backend_module = importlib.import_module("dense_encoders.evaluation.backends.exact")
# The search core every backend builds on: the running top-k, its faiss heaps, the score product.
core_module = importlib.import_module("dense_encoders.evaluation.backends.core")


def reference_topk(queries, documents, k, similarity):
    """Independent reference: full float64 score matrix, rows ranked by (-score, index) in python."""
    q = torch.as_tensor(np.asarray(queries), dtype=torch.float64)
    d = torch.as_tensor(np.asarray(documents), dtype=torch.float64)
    if similarity == "cosine":
        q = q / q.norm(dim=1, keepdim=True).clamp_min(1e-12)
        d = d / d.norm(dim=1, keepdim=True).clamp_min(1e-12)
    full = (q @ d.T).tolist()
    k = min(k, d.shape[0])
    indices = [sorted(range(len(row)), key=lambda j, row=row: (-row[j], j))[:k] for row in full]
    scores = [[row[j] for j in idx] for row, idx in zip(full, indices)]
    return torch.tensor(scores, dtype=torch.float64), torch.tensor(indices, dtype=torch.int64)


def assert_matches_reference(result, reference, atol=1e-5):
    scores, indices = result
    ref_scores, ref_indices = reference
    assert scores.dtype == torch.float32 and indices.dtype == torch.int64
    assert indices.shape == ref_indices.shape
    assert torch.equal(indices, ref_indices)
    torch.testing.assert_close(scores.double(), ref_scores, atol=atol, rtol=0)


@pytest.fixture(scope="module")
def random_data():
    gen = torch.Generator().manual_seed(1234)
    return torch.randn(10, 8, generator=gen), torch.randn(50, 8, generator=gen)


@pytest.mark.numerics
@pytest.mark.parametrize("similarity", ["dot", "cosine"])
@pytest.mark.parametrize("k", [1, 5, 50, 80])
def test_exact_search_matches_reference_with_uneven_chunks(random_data, similarity, k):
    queries, documents = random_data
    result = exact_search(
        queries, documents, k, similarity=similarity, query_chunk_size=3, document_chunk_size=7
    )
    assert result[0].shape == (10, min(k, 50))
    assert_matches_reference(result, reference_topk(queries, documents, k, similarity))


@pytest.mark.numerics
@pytest.mark.parametrize("k", [1, 4, 9, 30])
@pytest.mark.parametrize("document_chunk_size", [1, 4, 7, 100])
def test_exact_search_heavy_ties_match_reference(k, document_chunk_size):
    # Integer vectors in {-1, 0, 1}: scores are exact small integers, so almost every rank is a tie,
    # many straddling the k-th place inside a chunk and across chunk boundaries.
    gen = torch.Generator().manual_seed(7)
    queries = torch.randint(-1, 2, (9, 3), generator=gen).float()
    documents = torch.randint(-1, 2, (31, 3), generator=gen).float()
    result = exact_search(
        queries, documents, k, similarity="dot", query_chunk_size=4, document_chunk_size=document_chunk_size
    )
    assert_matches_reference(result, reference_topk(queries, documents, k, "dot"), atol=0)


@pytest.mark.parametrize("similarity", ["dot", "cosine"])
def test_duplicated_documents_lower_index_first_across_chunks(similarity):
    base = torch.eye(4) * 2.0  # exact scores; normalised copies are bitwise identical
    documents = base[torch.arange(22) % 4]  # doc j duplicates doc j % 4
    queries = torch.tensor([[3.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 5.0]])
    scores, indices = exact_search(
        queries, documents, 8, similarity=similarity, query_chunk_size=1, document_chunk_size=3
    )
    # Query 0: the best documents are the copies of e_0 (0, 4, 8, ...), then copies of e_1.
    assert indices[0].tolist() == [0, 4, 8, 12, 16, 20, 1, 5]
    # Query 1: copies of e_3 are 3, 7, 11, 15, 19 (five of them), then ties at 0 from index 0 on.
    assert indices[1].tolist() == [3, 7, 11, 15, 19, 0, 1, 2]
    assert scores[1, 5:].tolist() == [0.0, 0.0, 0.0]
    assert scores[0, 0] == scores[0, 5] > scores[0, 6] == scores[0, 7]


def test_exact_search_never_builds_more_than_one_block(monkeypatch, random_data):
    queries, documents = random_data
    shapes = []
    original = exact_backend_module.score_block

    def spy(query_block, document_block, **kwargs):
        block = original(query_block, document_block, **kwargs)
        shapes.append(tuple(block.shape))
        return block

    monkeypatch.setattr(exact_backend_module, "score_block", spy)
    result = exact_search(queries, documents, 5, similarity="dot", query_chunk_size=3, document_chunk_size=7)
    assert_matches_reference(result, reference_topk(queries, documents, 5, "dot"))
    assert len(shapes) == math.ceil(10 / 3) * math.ceil(50 / 7)
    assert max(rows for rows, _ in shapes) <= 3
    assert max(cols for _, cols in shapes) <= 7
    assert sum(rows * cols for rows, cols in shapes) == 10 * 50  # every pair scored exactly once


def test_exact_search_numpy_float64_input_and_progress_bar(random_data):
    queries, documents = random_data
    expected = exact_search(queries, documents, 6)
    scores, indices = exact_search(
        queries.double().numpy(), documents.double().numpy(), 6, document_chunk_size=11, show_progress_bar=True
    )
    assert scores.dtype == torch.float32 and indices.dtype == torch.int64
    assert torch.equal(indices, expected[1])
    torch.testing.assert_close(scores, expected[0])


def test_cosine_zero_vectors_give_no_nan():
    queries = torch.tensor([[0.0, 0.0], [1.0, 0.0]])
    documents = torch.tensor([[0.0, 0.0], [2.0, 0.0], [-1.0, 0.0]])
    scores, indices = exact_search(queries, documents, 3, similarity="cosine", document_chunk_size=2)
    assert not torch.isnan(scores).any()
    assert indices.tolist() == [[0, 1, 2], [1, 0, 2]]
    torch.testing.assert_close(scores, torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, -1.0]]))


def test_empty_queries_return_empty_tensors(random_data):
    _, documents = random_data
    scores, indices = exact_search(torch.empty(0, 8), documents, 5)
    assert scores.shape == (0, 0) and indices.shape == (0, 0)
    assert scores.dtype == torch.float32 and indices.dtype == torch.int64


@pytest.mark.numerics
@pytest.mark.parametrize("similarity", ["dot", "cosine"])
@pytest.mark.parametrize("k", [10, 400])
def test_faiss_search_matches_exact_search(similarity, k):
    pytest.importorskip("faiss")
    rng = np.random.default_rng(0)
    queries = rng.standard_normal((20, 16)).astype(np.float32)
    documents = rng.standard_normal((300, 16)).astype(np.float32)
    exact_scores, exact_indices = exact_search(queries, documents, k, similarity=similarity, document_chunk_size=64)
    faiss_scores, faiss_indices = faiss_search(queries, documents, k, similarity=similarity)
    assert faiss_scores.shape == (20, min(k, 300))
    assert faiss_scores.dtype == torch.float32 and faiss_indices.dtype == torch.int64
    assert (faiss_indices >= 0).all()
    assert torch.equal(faiss_indices, exact_indices)
    torch.testing.assert_close(faiss_scores, exact_scores, atol=1e-5, rtol=0)


def test_faiss_search_tie_order_and_empty_queries():
    pytest.importorskip("faiss")
    documents = torch.eye(3)[torch.arange(7) % 3] * 2.0
    queries = torch.tensor([[1.0, 0.0, 0.0]])
    scores, indices = faiss_search(queries, documents, 7, similarity="dot")
    assert indices.tolist() == [[0, 3, 6, 1, 2, 4, 5]]
    assert scores.tolist() == [[2.0, 2.0, 2.0, 0.0, 0.0, 0.0, 0.0]]
    empty_scores, empty_indices = faiss_search(torch.empty(0, 3), documents, 2)
    assert empty_scores.shape == (0, 0) and empty_indices.shape == (0, 0)


def test_search_dispatches_to_exact(random_data):
    queries, documents = random_data
    exact = exact_search(queries, documents, 4, similarity="dot")
    dispatched = search(queries, documents, 4, similarity="dot", backend="exact", document_chunk_size=9)
    assert torch.equal(dispatched[1], exact[1])
    torch.testing.assert_close(dispatched[0], exact[0])


@pytest.mark.numerics
def test_search_dispatches_to_faiss(random_data):
    pytest.importorskip("faiss")
    queries, documents = random_data
    exact = exact_search(queries, documents, 4, similarity="dot")
    via_faiss = search(queries, documents, 4, similarity="dot", backend="faiss")
    assert torch.equal(via_faiss[1], exact[1])
    torch.testing.assert_close(via_faiss[0], exact[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("fn", [exact_search, faiss_search])
@pytest.mark.parametrize(
    ("queries", "documents", "kwargs", "match"),
    [
        (torch.ones(2, 4), torch.ones(3, 4), {"k": 0}, r"k must be >= 1"),
        (torch.ones(2, 4), torch.ones(3, 4), {"k": -3}, r"k must be >= 1"),
        (torch.ones(2, 4), torch.ones(3, 4), {"k": 2.5}, r"k must be a positive integer"),
        (torch.ones(4), torch.ones(3, 4), {"k": 1}, r"queries must be a 2-D matrix.*reshape"),
        (torch.ones(2, 4), torch.ones(3, 4, 1), {"k": 1}, r"documents must be a 2-D matrix"),
        (torch.ones(2, 4), torch.ones(3, 5), {"k": 1},
         r"dimension mismatch: queries have dim 4 but documents have dim 5"),
        (torch.ones(2, 4), torch.ones(3, 4), {"k": 1, "similarity": "l2"}, r"unknown similarity 'l2'.*cosine.*dot"),
        (torch.ones(2, 4), torch.ones(0, 4), {"k": 1}, r"no documents to search"),
    ],
)
def test_input_errors(fn, queries, documents, kwargs, match):
    if fn is faiss_search:
        pytest.importorskip("faiss")
    with pytest.raises(ValueError, match=match):
        fn(queries, documents, **kwargs)


@pytest.mark.parametrize("name", ["query_chunk_size", "document_chunk_size"])
def test_chunk_size_errors(name):
    with pytest.raises(ValueError, match=rf"{name} must be a positive integer"):
        exact_search(torch.ones(2, 4), torch.ones(3, 4), 1, **{name: 0})


def test_search_unknown_backend():
    with pytest.raises(ValueError, match=r"unknown backend 'annoy'.*exact.*faiss"):
        search(torch.ones(2, 4), torch.ones(3, 4), 1, backend="annoy")


# ---- backends: one interface, one registry ------------------------------------------------------------------


def test_the_registered_backends_are_the_names_evaluate_offers():
    from dataclasses import fields

    from dense_encoders.evaluation.backends import BACKENDS, REGISTERED
    from dense_encoders.settings.evaluation import EvaluationArguments
    from dense_encoders.vectors import SEARCH_BACKEND_NAMES

    assert all(issubclass(backend, SearchBackend) for backend in REGISTERED)
    assert tuple(BACKENDS) == SEARCH_BACKEND_NAMES == ("exact", "faiss")
    backend_field = next(field for field in fields(EvaluationArguments) if field.name == "backend")
    assert tuple(backend_field.metadata["choices"]) == SEARCH_BACKEND_NAMES


class NaiveSearch(SearchBackend):
    """A backend written against the interface alone: the full float64 score matrix, ranked in python."""

    name = "naive"

    def search(self, queries, documents, k, *, similarity="cosine"):
        scores, indices = reference_topk(queries, documents, k, similarity)
        return scores.float(), indices


def test_a_new_backend_is_a_class_and_its_registration(monkeypatch, random_data):
    from dense_encoders.evaluation import backends

    monkeypatch.setitem(backends.BACKENDS, "naive", NaiveSearch)
    queries, documents = random_data
    expected = reference_topk(queries, documents, 7, "cosine")
    scores, indices = search(queries, documents, 7, backend="naive")
    assert torch.equal(indices, expected[1]) and torch.equal(scores, expected[0].float())
    assert torch.equal(search(queries, documents, 7, backend="exact")[1], expected[1])
    # a backend that does not say how it searches shards refuses them in one line
    with pytest.raises(ValueError, match="^the naive backend does not search embedding shards$"):
        NaiveSearch().search_shards(queries.numpy(), None, 7)


def test_the_faiss_backend_refuses_shards_naming_what_searches_them():
    from dense_encoders.evaluation.backends import get_backend

    with pytest.raises(ValueError, match=r"^corpus embeddings are searched exactly, shard by shard; for a FAISS index "
                       r"use `dense-encoders index` and `dense-encoders search`$"):
        get_backend("faiss").search_shards(np.ones((2, 4), dtype=np.float32), None, 1)


def test_no_code_outside_the_backends_branches_on_a_backend_name():
    """A new backend is one file plus its registration: no ``backend == "exact"`` elsewhere in the package."""
    import ast
    from pathlib import Path

    import dense_encoders
    from dense_encoders.vectors import SEARCH_BACKEND_NAMES

    root = Path(dense_encoders.__file__).parent
    branches = []
    for path in root.rglob("*.py"):
        if "backends" in path.relative_to(root).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Compare) and any(
                    isinstance(side, ast.Constant) and side.value in SEARCH_BACKEND_NAMES
                    for side in (node.left, *node.comparators)):
                branches.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    assert branches == []


def test_search_is_the_entry_point_above_the_backends_and_their_core():
    """search.py re-exports the core's public names (callers import them from there as before); the backends import
    the core, never search.py; the core imports no backend."""
    from dense_encoders.evaluation.backends import core

    for name in ("NORMALIZE_EPS", "SEED_STRIDE", "RunningTopK", "score_block", "score_threads", "scores_are_bounded",
                 "validate_k", "numpy_product"):
        assert getattr(search_module, name) is getattr(core, name), name
    assert RunningTopK is core.RunningTopK
    imported = {name: {target for _, target, _ in _imports_in(path)} for name, path in _evaluation_modules().items()}
    for backend in ("backends.exact", "backends.faiss", "backends.base", "backends", "backends.core"):
        assert "dense_encoders.evaluation.search" not in imported[backend], backend
    assert not {target for target in imported["backends.core"] if target.startswith("dense_encoders.evaluation")}


def _evaluation_modules() -> dict:
    import dense_encoders

    root = Path(dense_encoders.__file__).parent / "evaluation"
    return {".".join(path.relative_to(root).with_suffix("").parts).removesuffix("__init__").rstrip(".") or "__init__":
            path for path in sorted(root.rglob("*.py"))}


def _imports_in(path: Path) -> list[tuple[int, str, list[str]]]:
    """``(line, absolute module, names)`` of every import in ``path`` (inside functions too)."""
    import ast

    import dense_encoders

    # the package a relative import starts from: the folder of the module (of an __init__.py: its own package)
    package = list(path.relative_to(Path(dense_encoders.__file__).parent.parent).parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            found.append((node.lineno, target, [alias.name for alias in node.names]))
    return found


def test_evaluation_imports_no_private_name_and_no_circle():
    """No module of evaluation imports another module's private (leading underscore) name, and evaluation's
    modules import each other without a circle (imports inside functions count)."""
    modules = _evaluation_modules()
    full = {("dense_encoders.evaluation." + name).removesuffix(".__init__"): name for name in modules}
    private, graph = [], {}
    for name, path in modules.items():
        graph[name] = set()
        for line, target, names in _imports_in(path):
            if target.startswith("dense_encoders"):
                private += [f"{name}:{line} imports {target}.{alias}" for alias in names
                            if alias.startswith("_") and not alias.startswith("__")]
            for module in (target, *(f"{target}.{alias}" for alias in names)):
                if module in full and full[module] != name:
                    graph[name].add(full[module])
    assert not private, private

    def reaches(start, goal, seen=()):
        return any(target == goal or (target not in seen and reaches(target, goal, (*seen, target)))
                   for target in graph.get(start, ()))

    circles = sorted(module for module in graph if reaches(module, module))
    assert not circles, f"import circles through {circles}"
    assert "backends.core" in graph["backends.exact"] and "backends.exact" in graph["search"]  # the rule sees edges


def test_topk_to_run_by_hand():
    scores = torch.tensor([[0.75, 0.5, 0.25], [1.0, -0.5, 0.0]])
    indices = torch.tensor([[2, 0, 3], [1, 2, -1]])  # -1 is faiss padding: skipped
    run = topk_to_run(["q1", "q2"], ["d0", "d1", "d2", "d3"], scores, indices)
    assert run == {"q1": {"d2": 0.75, "d0": 0.5, "d3": 0.25}, "q2": {"d1": 1.0, "d2": -0.5}}
    assert list(run["q1"]) == ["d2", "d0", "d3"]  # ranking order preserved
    assert all(type(v) is float for row in run.values() for v in row.values())
    # numpy input works the same way
    assert topk_to_run(["q1", "q2"], ["d0", "d1", "d2", "d3"], scores.numpy(), indices.numpy()) == run


@pytest.mark.numerics
def test_topk_to_run_round_trip_with_exact_search(random_data):
    queries, documents = random_data
    scores, indices = exact_search(queries, documents, 3)
    qids = [f"q{i}" for i in range(10)]
    dids = [f"doc-{j}" for j in range(50)]
    run = topk_to_run(qids, dids, scores, indices)
    ref_scores, ref_indices = reference_topk(queries, documents, 3, "cosine")
    for i, qid in enumerate(qids):
        assert list(run[qid]) == [dids[j] for j in ref_indices[i].tolist()]
        assert run[qid][dids[ref_indices[i, 0]]] == pytest.approx(ref_scores[i, 0].item(), abs=1e-5)


@pytest.mark.parametrize(
    ("query_ids", "document_ids", "scores", "indices", "match"),
    [
        (["q1"], ["d0", "d1"], torch.zeros(2, 1), torch.zeros(2, 1, dtype=torch.long),
         r"got 1 query_ids for 2 result rows"),
        (["q1"], ["d0", "d1"], torch.zeros(1, 2), torch.zeros(1, 1, dtype=torch.long), r"same shape"),
        (["q1"], ["d0", "d1"], torch.zeros(2), torch.zeros(2, dtype=torch.long), r"must be 2-D"),
        (["q1"], ["d0", "d1"], torch.zeros(1, 1), torch.tensor([[2]]), r"index 2 is out of range for 2 document_ids"),
        (["q1", "q1"], ["d0"], torch.zeros(2, 1), torch.zeros(2, 1, dtype=torch.long), r"query_ids contain duplicates"),
        (["q1"], ["d0", "d0"], torch.zeros(1, 1), torch.zeros(1, 1, dtype=torch.long),
         r"document_ids contain duplicates"),
    ],
)
def test_topk_to_run_errors(query_ids, document_ids, scores, indices, match):
    with pytest.raises(ValueError, match=match):
        topk_to_run(query_ids, document_ids, scores, indices)


def _naive_running_topk(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's best k by a Python sort on (-score, index)."""
    best_scores, best_indices = [], []
    for row in scores.tolist():
        order = sorted(range(len(row)), key=lambda i: (-row[i], i))[:k]
        best_scores.append([row[i] for i in order])
        best_indices.append(order)
    return torch.tensor(best_scores), torch.tensor(best_indices)


@pytest.mark.parametrize("selection", ["tensor operations", "faiss heaps"])
@pytest.mark.parametrize("case", ["ties", "gaussian", "ascending", "infinities"])
def test_running_topk_keeps_the_order_of_a_full_sort_block_by_block(case, selection, monkeypatch):
    # RunningTopK merges a block's entries above each query's running k-th score, or (a range not yet full, more
    # than CANDIDATES_PER_K * k candidates: "ascending" scores make every later block beat the running list) takes
    # the block's own top-k first; either way the order is that of one full sort by (-score, index). With faiss,
    # bounded blocks go to its heaps; "infinities" sends a range from the heaps to the tensor operations midway.
    heap_blocks = []
    if selection == "faiss heaps":
        pytest.importorskip("faiss")
        add = core_module._HeapTopK.add
        monkeypatch.setattr(core_module._HeapTopK, "add",
                            lambda self, block, offset: (heap_blocks.append(offset), add(self, block, offset)))
    gen = torch.Generator().manual_seed(11)
    for trial in range(60):
        rows, columns = int(torch.randint(1, 7, (1,), generator=gen)), int(torch.randint(1, 250, (1,), generator=gen))
        k, block = int(torch.randint(1, 40, (1,), generator=gen)), int(torch.randint(1, 60, (1,), generator=gen))
        if case == "gaussian":
            scores = torch.randn(rows, columns, generator=gen)
        else:
            levels = int(torch.randint(1, 9, (1,), generator=gen))
            scores = torch.randint(0, levels, (rows, columns), generator=gen).float()
        if case == "ascending":
            scores = torch.sort(scores + torch.randn(rows, columns, generator=gen) * (trial % 2), dim=1).values
        if case == "infinities":
            draw = torch.rand(rows, columns, generator=gen)
            scores[(draw > 0.5) & (draw < 0.53)] = float("inf")
            scores[(draw > 0.6) & (draw < 0.63)] = float("-inf")
        running = RunningTopK(k)
        for start in range(0, columns, block):
            block_scores = scores[:, start : start + block]
            bounded = selection == "faiss heaps" and bool(torch.isfinite(block_scores).all())
            running.add(0, block_scores, start, bounded=bounded)
        got_scores, got_indices = running.result()
        expected_scores, expected_indices = _naive_running_topk(scores, k)
        assert torch.equal(got_indices, expected_indices), (case, trial)
        assert torch.equal(got_scores, expected_scores), (case, trial)
    assert bool(heap_blocks) == (selection == "faiss heaps")


def test_scores_are_bounded_by_the_product_of_the_largest_norms():
    from dense_encoders.evaluation.search import scores_are_bounded

    half_max = torch.finfo(torch.float32).max / 2
    unit = torch.eye(3)
    assert scores_are_bounded(unit, unit * 1e19)  # norms 1 and 1e19: |score| <= 1e19
    # norms 2e19 and 1e19: a score could reach 2e38 > float32 max / 2 (1.7e38), though each vector is finite
    assert not scores_are_bounded(unit * 2e19, unit * 1e19)
    assert 2e19 * 1e19 > half_max > 1e19 * 1e19
    for bad in (float("nan"), float("inf"), float("-inf")):
        documents = unit.clone()
        documents[1, 2] = bad
        assert not scores_are_bounded(unit, documents), bad
    assert not scores_are_bounded(unit[:0], unit)


def test_largest_row_norm_is_what_bounds_a_search_computed_once_per_block():
    from dense_encoders.evaluation.backends.core import largest_row_norm, norms_bound_scores

    rows = torch.tensor([[3.0, 4.0], [1.0, 0.0], [-6.0, 8.0]])
    assert largest_row_norm(rows) == 10.0 and largest_row_norm(rows[:2]) == 5.0
    assert math.isnan(largest_row_norm(torch.tensor([[1.0, float("nan")]]))) and math.isnan(largest_row_norm(rows[:0]))
    assert largest_row_norm(torch.tensor([[float("-inf"), 0.0]])) == math.inf
    assert largest_row_norm(torch.tensor([[3e19, 0.0]])) == math.inf  # its square overflows float32: no bound
    assert norms_bound_scores(1.0, 1e19) and not norms_bound_scores(2e19, 1e19)
    assert not norms_bound_scores(math.nan, 1.0) and not norms_bound_scores(math.inf, 0.0)


def test_exact_search_selects_the_same_with_and_without_faiss_heaps(monkeypatch):
    # integer vectors: most scores tie, so which of the tied documents at the k-th place are kept, and their order,
    # are checked across query ranges and document blocks; a NaN document moves the heaps' ranges to the tensor
    # operations midway
    pytest.importorskip("faiss")
    gen = torch.Generator().manual_seed(5)
    queries = torch.randint(-2, 3, (37, 8), generator=gen).float()
    documents = torch.randint(-2, 3, (500, 8), generator=gen).float()
    with_nan = documents.clone()
    with_nan[301, 4] = float("nan")
    for docs in (documents, with_nan):
        kwargs = dict(similarity="dot", query_chunk_size=16, document_chunk_size=64)
        heaps = exact_search(queries, docs, 50, **kwargs)
        monkeypatch.setattr(core_module, "_faiss_heaps", lambda: None)
        tensors = exact_search(queries, docs, 50, **kwargs)
        monkeypatch.undo()
        scores = queries.double() @ docs.double().T
        expected_scores, expected_indices = _naive_running_topk(scores.float(), 50)
        assert torch.equal(heaps[1], tensors[1])
        assert torch.equal(heaps[0].nan_to_num(), tensors[0].nan_to_num())
        if docs is documents:
            assert torch.equal(heaps[1], expected_indices)
            assert torch.equal(heaps[0], expected_scores)


def test_block_selection_selects_in_a_helper_thread_what_running_topk_selects_inline():
    # the blocks come from one buffer pair, each overwritten two blocks later: a selection that read a buffer after
    # it was handed out again would differ from the inline one
    from dense_encoders.evaluation.backends.core import BlockSelection

    gen = torch.Generator().manual_seed(7)
    queries = torch.randint(-2, 3, (40, 8), generator=gen).float()
    documents = torch.randint(-2, 3, (700, 8), generator=gen).float()
    documents[500, 3] = float("nan")  # from here on the tensor operations select, not faiss's heaps
    inline = RunningTopK(30)
    with BlockSelection(30, 16, 64, torch.device("cpu")) as selection:
        for q_start in range(0, 40, 16):
            for d_start in range(0, 700, 64):
                q_block, d_block = queries[q_start : q_start + 16], documents[d_start : d_start + 64]
                bounded = not bool(d_block.isnan().any())
                scores = torch.mm(q_block, d_block.T, out=selection.block(len(q_block), len(d_block)))
                inline.add(q_start, scores.clone(), d_start, bounded=bounded)
                selection.add(q_start, scores, d_start, bounded=bounded)
        got = selection.result()
    expected = inline.result()
    assert torch.equal(got[1], expected[1]) and torch.equal(got[0].nan_to_num(), expected[0].nan_to_num())
    # an error of the selection is raised in the caller, at the next block or at the result
    with BlockSelection(5, 2, 4, torch.device("cpu")) as selection:
        selection.add(0, torch.zeros(2, 4), 0)
        selection.add(0, torch.zeros(3, 4), 4)  # three rows for a range of two
        with pytest.raises(RuntimeError):
            selection.block(2, 4)
            selection.result()


# ---- the score product: the same bits from run to run, the ranking of a float64 reference --------------------


def near_ties(seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Unit-scale queries and documents where many scores tie: exact copies of documents (equal scores, the lower
    index first) and copies moved by about 1e-7 (scores within float32 rounding of each other)."""
    rng = np.random.default_rng(seed)
    documents = rng.standard_normal((700, 32)).astype(np.float32)
    documents /= np.linalg.norm(documents, axis=1, keepdims=True)
    documents[400:500] = documents[:100]
    documents[500:600] = documents[100:200] + 1e-7 * rng.standard_normal((100, 32)).astype(np.float32)
    queries = rng.standard_normal((23, 32)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    queries[20:] = documents[[0, 100, 150]]  # queries whose best documents have copies
    return queries, documents


def assert_ranks_as_float64(queries: np.ndarray, documents: np.ndarray, result, window: float) -> None:
    """The ranking of a float64 reference except among scores within ``window`` of each other: a document ranked
    above another scores at least as high in float64, less ``window``, and so does the last one returned against
    every document not returned; the scores are float64's to float32 rounding; equal scores list the lower index
    first."""
    scores, indices = (np.asarray(value) for value in result)
    reference = queries.astype(np.float64) @ documents.astype(np.float64).T
    rounding = 4 * queries.shape[1] * np.finfo(np.float32).eps * max(1.0, float(np.abs(reference).max()))
    returned = np.take_along_axis(reference, indices, axis=1)
    np.testing.assert_allclose(scores, returned, rtol=0, atol=rounding)
    assert (returned[:, :-1] >= returned[:, 1:] - window).all()
    left_out = reference.copy()
    np.put_along_axis(left_out, indices, -np.inf, axis=1)
    assert (returned[:, -1] >= left_out.max(axis=1) - window).all()
    tied = scores[:, 1:] == scores[:, :-1]
    assert (indices[:, 1:] > indices[:, :-1])[tied].all()


@pytest.fixture(params=["torch", "numpy"])
def score_product(request, monkeypatch):
    """Every score block multiplied by torch's BLAS, or by numpy's at a fixed thread count (threadpoolctl), as
    :func:`score_block` chooses by machine; the selection in faiss's heaps when faiss is installed."""
    limits = None
    if request.param == "numpy":
        limits = pytest.importorskip("threadpoolctl").threadpool_limits
    monkeypatch.setattr(core_module, "numpy_product", lambda: limits)
    return request.param


@pytest.mark.numerics
@pytest.mark.parametrize("threads", [1, 2])
def test_exact_search_gives_the_same_bits_every_run_and_the_float64_ranking(score_product, threads, tmp_path):
    from dense_encoders.data.embedding_shards import EmbeddingShards, save_embedding_shards
    from dense_encoders.evaluation.shard_search import search_shards

    queries, documents = near_ties()
    ids = [f"d{i}" for i in range(len(documents))]
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        runs = {"in memory": (documents, lambda: exact_search(queries, documents, 50, similarity="dot",
                                                               query_chunk_size=8, document_chunk_size=128))}
        for dtype in ("float32", "float16"):
            folder = save_embedding_shards(tmp_path / dtype, documents, ids, shard_size=250, dtype=dtype).folder
            stored = np.concatenate([rows for _, rows, _ in EmbeddingShards.open(folder).shards()])
            runs[f"{dtype} shards"] = (stored, lambda folder=folder: search_shards(
                queries, EmbeddingShards.open(folder), 50, similarity="dot", query_chunk_size=8,
                document_chunk_size=128))
        for name, (matrix, run) in runs.items():
            first, second = run(), run()
            assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1]), name
            assert_ranks_as_float64(queries, matrix, first, window=1e-6)
    finally:
        torch.set_num_threads(previous)


def test_heaps_seeded_from_a_block_sample_keep_every_query_exact():
    # _HeapTopK seeds each query's empty heap just below a score reached by at least k of the first block's scores,
    # estimated from every SEED_STRIDE-th column: row 0 is seeded; row 1, whose sampled columns hold its largest
    # scores (too few at or above the estimate), keeps faiss's empty slots. Both end as a full sort ranks them.
    faiss = pytest.importorskip("faiss")
    gen = torch.Generator().manual_seed(2)
    k, stride = 30, core_module.SEED_STRIDE
    scores = torch.randn(2, 400, generator=gen)
    scores[1, ::stride] += 10.0
    heap = core_module._HeapTopK(faiss, 2, k)
    heap._seed(np.ascontiguousarray(scores.numpy()))
    floor = heap._values[:, 0].copy()
    assert (heap._values == floor[:, None]).all()
    assert floor[1] == np.finfo(np.float32).min  # not seeded
    assert int((scores[0] > float(floor[0])).sum()) >= k > 0 and floor[0] > float(scores[0].min())
    heap = core_module._HeapTopK(faiss, 2, k)
    for start in range(0, 400, 150):
        heap.add(scores[:, start : start + 150], start)
    expected_scores, expected_indices = _naive_running_topk(scores, k)
    got_scores, got_indices = heap.result()
    assert torch.equal(got_indices, expected_indices) and torch.equal(got_scores, expected_scores)
