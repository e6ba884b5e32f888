"""Every shell and Python block of README.md and docs/*.md runs as written (issue 36, section 2).

Each page's blocks run in order in a folder of their own, as a reader would run them one after another.
Shell commands run in this process through ``dense_encoders.cli.main`` (the ``dense-encoders`` console
script's function) and must exit 0; Python blocks run with ``exec``. The test changes only what a test
must, each change listed in a table below with its reason:

* MODELS: a Hub id or a placeholder (``CE``, ``MODEL``, ...) -> a tiny local model built from a config;
* DATA: placeholders -> a small BEIR folder cut from the bundled retrieval set; the files a reader brings
  (``collection.tsv``, ``wiki-bookcorpus.txt``, ``msmarco/``, ...) are written under the documented names from
  the same small data (USER_FILES); HUB_DATASETS: Hub dataset ids (``BeIR/scifact``) -> the same small data,
  served in BEIR's Hub layout by the loopback Hub of tests/hub_server.py (the commands download it as a
  reader's would, into a Hugging Face cache of the test's own);
* SIZES: the papers' steps, batches and GPUs -> one step, two queries, this CPU (``--bf16 false``);
* REWRITES: ``torchrun --nproc_per_node N -m dense_encoders.cli ...`` runs as one process (the multi-process
  paths have their own torchrun tests), ``push`` goes to the loopback Hub of tests/hub_server.py, ``pip
  install`` and the test suite itself are not run;
* an optional ``[--flag VALUE]`` of a synopsis is run with the flag (or, where noted, once per option).

A doc command that fails fails this test, naming the page, the block and the command as run. Blocks whose
comments state a fact that is cheap to check (the same vectors from ``AutoModel`` and ``SentenceTransformer``)
are checked against it.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from conftest import REPO_ROOT, float32_atol, write_tite_tokenizer

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
BUNDLED_BEIR = REPO_ROOT / "src" / "dense_encoders" / "resources" / "quickstart_beir"
FENCE = re.compile(r"^(?P<indent> *)```(?P<language>\w*)\n(?P<body>.*?)^(?P=indent)```", re.M | re.S)
HUB_TOKEN = "hf_docs_commands_token"


@dataclass
class Block:
    page: str
    index: int
    language: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.page}#{self.index}"


def code_blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page`` (also those indented inside a list), numbered from 0 in page order."""
    return [Block(page.name, index, match["language"], textwrap.dedent(match["body"]))
            for index, match in enumerate(FENCE.finditer(page.read_text(encoding="utf-8")))]


# ------------------------------------------------------------------------------------------ the substitutions

# MODELS: Hub ids and placeholders -> the tiny models of `models` (whole shell tokens, or Python string literals)
MODELS = {
    "bert-base-uncased": "bert",  # a 12-layer BertForMaskedLM of width 32 (Condenser's 6 + 6 layers, skip_from 6)
    "cross-encoder/ms-marco-MiniLM-L6-v2": "cross_encoder",
    "cross-encoder/ms-marco-MiniLM-L-12-v2": "cross_encoder",
    "CROSS_ENCODER": "cross_encoder",
    "CE": "cross_encoder",
    "sentence-transformers/msmarco-MiniLM-L-12-v3": "dual_encoder",
    "DE": "dual_encoder",
    "MODEL": "dual_encoder",
}
# DATA: placeholders -> the small BEIR folder; the synopses' other placeholders
DATA = {
    "BEIR_FOLDER": "{beir}",
    "DATA": "{beir}",
    "SRC": "condenser-run/",  # a luyug/Condenser folder with its head (USER_FILES)
    "OUT": "converted/",
    "N": "6",
    "PATTERN": "distillation_*.json",
    # an IVF with 65536 cells and 64-byte codes needs millions of vectors; the small corpus has 60
    "IVF65536,PQ64": "IVF4,PQ4x4",
    "emb/msmarco/index-IVF65536-PQ64.faiss": "emb/msmarco/index-IVF4-PQ4x4.faiss",
    # 100 candidates per training query: 8 are enough for the tiny cross-encoder to score in seconds
    "100": "8",
}
# HUB_DATASETS: Hub dataset ids the docs name -> served by the loopback Hub, made from the small BEIR folder in BEIR's
# layout (corpus.jsonl.gz, queries.jsonl.gz; the qrels in the companion <id>-qrels)
HUB_DATASETS = ("BeIR/scifact",)
# SIZES: flag -> value set (replaced where the doc gives it, else added; None: a bare flag added), per subcommand
SIZES = {
    "pretrain": {"--max-steps": "1", "--per-device-train-batch-size": "2", "--fp16": "false", "--bf16": "false"},
    # the recipe's backbone is bert-base-uncased; coCondenser's gradient cache chunk fits the tiny batch
    "pretrain condenser": {"--backbone": "{bert}"},
    "pretrain cocondenser": {"--grad-cache-chunk-size": "2"},
    # the paper's TITE is BERT-base-sized at 512 tokens: its tiny preset, at the 16 positions it has
    "pretrain tite": {"--preset": "tiny-tite-2-late", "--max-seq-length": "16"},
    "distill": {"--max-steps": "1", "--per-device-train-batch-size": "2", "--bf16": "false"},
    "infuse": {"--epochs": "1"},
    # the real all-MiniLM-L6-v2 takes 4 minutes here (tests/test_quickstart.py runs it): a tiny teacher of the
    # tiny TITE preset's shape, the small data, a tenth of an epoch
    "quickstart": {"--teacher": "{teacher}", "--tite-preset": "tiny-tite-2-late", "--data": "{beir}",
                   "--epochs": "0.5", "--batch-size": "4"},
    # GPU workloads -> tiny random models (--quick) on a few texts, on this machine's device
    "bench": {"--quick": None, "--num-docs": "16", "--doc-batch": "8", "--num-queries": "16", "--query-batch": "8"},
    "push": {"--token": HUB_TOKEN, "--endpoint": "{hub}"},
}
# synopses whose optional options are run once each (after a run without any), not all together
EACH_OPTION = {"hub.md#0"}  # --revision v2 and --create-pr do not combine on a new repository
# commands that are not run, and why
SKIPPED = {
    "pip": "installs into the environment the tests run in (the package under test is that installation)",
    "python -m pytest": "the test suite itself",
}
TORCHRUN = re.compile(r"^torchrun --nproc_per_node \d+ -m dense_encoders\.cli ")


def substitute(token: str, models: dict[str, str]) -> str:
    if token in MODELS:
        return models[MODELS[token]]
    if token in DATA:
        return DATA[token].format(**models)
    return token


def set_flag(argv: list[str], flag: str, value: str | None) -> list[str]:
    """``argv`` with ``flag`` set to ``value`` (either spelling of the flag; a bare flag gets the value)."""
    names = {flag, "--" + flag[2:].replace("-", "_")}
    for index, token in enumerate(argv):
        if token in names:
            if value is None:
                return argv
            if index + 1 < len(argv) and not argv[index + 1].startswith("--"):
                return [*argv[:index + 1], value, *argv[index + 2:]]
            return [*argv[:index + 1], value, *argv[index + 1:]]
    return [*argv, flag] if value is None else [*argv, flag, value]


def sized(argv: list[str], models: dict[str, str]) -> list[str]:
    keys = [argv[0]] + ([f"{argv[0]} {argv[1]}"] if len(argv) > 1 else [])
    for key in keys:
        for flag, value in SIZES.get(key, {}).items():
            argv = set_flag(argv, flag, None if value is None else value.format(**models))
    if argv[0] == "bench" and not torch.cuda.is_available():
        argv = set_flag(argv, "--device", "cpu")
    if argv[0] == "bench" and "--end-to-end" in argv:  # a few texts, not the 100,000 of a GPU measurement
        argv = set_flag(argv, "--num-texts", "16")
    return argv


def optional_variants(line: str, each: bool) -> list[str]:
    """A synopsis line with its ``[...]`` options: all of them, or (``each``) none and then each one alone;
    ``[X ...]`` (more of X) becomes a second X."""
    line = re.sub(r"\[(\S+) \.\.\.\]", r"\1", line)
    line = re.sub(r" \.\.\.(?= |$)", "", line)  # `--data scifact nfcorpus fiqa ...`: the three named
    options = re.findall(r"\[([^\]]+)\]", line)
    bare = re.sub(r" ?\[[^\]]+\]", "", line)
    if not each:
        return [re.sub(r"\[([^\]]+)\]", r"\1", line)]
    return [bare, *[f"{bare} {option}" for option in options]]


def shell_commands(block: Block) -> list[str]:
    """The commands of a shell block: continuation lines joined, comments dropped, ``&&`` chains split."""
    text = re.sub(r"\\\n\s*", " ", block.text)
    commands = []
    for line in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()  # a comment: the line, or its end after a space
        if not line:
            continue
        for command in line.split(" && "):
            commands += optional_variants(command.strip(), block.id in EACH_OPTION)
    return commands


def command_substitution(token: str) -> str:
    """``$(...)`` inside a token, run by bash (the docs use it for a path a Python one-liner prints)."""
    def run(match):
        return subprocess.run(["bash", "-c", match[1]], capture_output=True, text=True, check=True).stdout.strip()

    return re.sub(r"\$\((.*)\)", run, token)


def run_shell_block(block: Block, models: dict[str, str], capsys) -> list[str]:
    """Run every command of ``block``; returns the argv lists run (for the assertions of some blocks)."""
    from dense_encoders.cli import main

    ran = []
    for command in shell_commands(block):
        if any(command.startswith(prefix) for prefix in SKIPPED):
            continue
        command = TORCHRUN.sub("dense-encoders ", command)
        tokens = [command_substitution(token) for token in shlex.split(command)]
        assert tokens[0] == "dense-encoders", f"{block.id}: the test does not know how to run `{command}`"
        argv = sized([substitute(token, models) for token in tokens[1:]], models)
        capsys.readouterr()
        code = main(argv)
        captured = capsys.readouterr()
        assert code == 0, (f"{block.id}: `{command}` failed (exit {code}) as `dense-encoders {shlex.join(argv)}`:\n"
                           f"{captured.err[-3000:]}")
        ran.append(argv)
        if os.environ.get("DOCS_LOG"):
            with open(os.environ["DOCS_LOG"], "a") as log:
                log.write(f"{block.id}: {shlex.join(argv)}\n")
    return ran


def run_python_block(block: Block, models: dict[str, str]) -> dict:
    code = block.text
    for literal, model in MODELS.items():
        code = code.replace(f'"{literal}"', repr(models[model]))
    namespace: dict = {"__name__": "__docs__"}
    exec(compile(code, block.id, "exec"), namespace)  # noqa: S102 - the documentation's own code
    return namespace


# ------------------------------------------------------------------------------------------ tiny models and data


def _save_bert(folder: Path, tok, model_class, **overrides) -> str:
    from transformers import BertConfig

    torch.manual_seed(0)
    settings = dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=512, num_labels=1)
    model_class(BertConfig(**{**settings, **overrides})).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def _save_sentence_transformer(folder: Path, tok, num_layers: int) -> str:
    """A tiny BERT bi-encoder with sentence-transformers files: mean pooling, cosine."""
    from transformers import BertModel

    from dense_encoders.checkpoints.folder import write_sentence_transformers_files

    _save_bert(folder, tok, BertModel, num_hidden_layers=num_layers)
    write_sentence_transformers_files(folder, pooling="mean", similarity="cosine")
    return str(folder)


def _save_tite(folder: Path, tok) -> str:
    from dense_encoders import TiteModel
    from dense_encoders.models.tite import tite_preset

    torch.manual_seed(0)
    TiteModel(tite_preset("tiny-tite-2-late", vocab_size=len(tok))).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def write_small_beir(folder: Path, documents: int = 60, train: int = 16, test: int = 8) -> Path:
    """The bundled retrieval set cut down: its first ``documents`` passages, and the first ``train`` / ``test``
    queries whose judged passages are all among them (qrels ``train``, ``test``, and ``dev`` = ``test``)."""
    corpus = (BUNDLED_BEIR / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:documents]
    kept = {json.loads(line)["_id"] for line in corpus}
    folder.mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("\n".join(corpus) + "\n", encoding="utf-8")
    queries = set()
    (folder / "qrels").mkdir()
    for split, count in (("train", train), ("test", test)):
        rows = [line.split("\t") for line in (BUNDLED_BEIR / "qrels" / f"{split}.tsv").read_text().splitlines()[1:]]
        judged: dict[str, list[list[str]]] = {}
        for row in rows:
            judged.setdefault(row[0], []).append(row)
        chosen = [q for q, rows_of_q in judged.items() if all(row[1] in kept for row in rows_of_q)][:count]
        assert len(chosen) == count, split
        queries.update(chosen)
        lines = ["query-id\tcorpus-id\tscore", *("\t".join(row) for q in chosen for row in judged[q])]
        (folder / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    shutil.copy(folder / "qrels" / "test.tsv", folder / "qrels" / "dev.tsv")
    all_queries = (BUNDLED_BEIR / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    (folder / "queries.jsonl").write_text(
        "\n".join(line for line in all_queries if json.loads(line)["_id"] in queries) + "\n", encoding="utf-8")
    return folder


def _records(beir: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (beir / name).read_text(encoding="utf-8").splitlines()]


# a TITE of the authors' layout (github.com/webis-de/tite): their config keys, their weight names (the tables of
# docs/checkpoints-from-other-implementations.md), no tokenizer (their TiteModel.save_pretrained writes none)
AUTHORS_CONFIG = {
    "absolute_positional_embedding_type": "learned", "relative_positional_embedding_type": "rotary",
    "architectures": ["TiteModel"], "dropout_prob": 0.1, "hidden_act": "gelu_pytorch_tanh",
    "hidden_sizes": [32, 32, 32], "num_attention_heads": [4, 4, 4], "intermediate_sizes": [64, 64, 64],
    "kernel_sizes": [None, 4, 4], "strides": [None, 4, 4], "layer_norm_eps": 1e-12, "max_position_embeddings": 16,
    "model_type": "tite", "norm_location": "post", "norm_type": "layer", "num_hidden_layers": 3, "pad_token_id": 0,
    "pooling_implementation": "triton", "pooling_location": "intra", "rope_implementation": "eager",
    "rotary_interleaved": True, "initializer_range": 0.02, "vocab_size": 100,
}
AUTHORS_NAMES = {"attention.LayerNorm": "attention.norm", "intermediate": "mlp.intermediate_dense",
                 "output": "mlp.out_dense", "LayerNorm": "mlp.norm"}


def authors_tensors() -> dict[str, torch.Tensor]:
    from dense_encoders import TiteModel
    from dense_encoders.checkpoints.tite_authors import tite_config_from_authors

    config, _ = tite_config_from_authors(AUTHORS_CONFIG)
    generator = torch.Generator().manual_seed(0)
    tensors = {}
    for name, parameter in TiteModel(config).state_dict().items():
        if name.startswith("layers."):
            index, _, rest = name[len("layers."):].partition(".")
            module, _, leaf = rest.rpartition(".")
            name = f"encoder.layers.{index}.{AUTHORS_NAMES.get(module, module)}.{leaf}"
        else:
            name = name.replace("embeddings.LayerNorm", "embeddings.norm")
        tensors[name] = torch.randn(parameter.shape, generator=generator) * 0.2
    return tensors


def write_authors_folder(folder: Path) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(AUTHORS_CONFIG))
    save_file(authors_tensors(), folder / "model.safetensors")


def write_lightning_ir_folder(folder: Path) -> None:
    """A Lightning IR DPR bi-encoder (``lir-dpr``) with the authors' TITE as backbone and a linear projection."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    write_tite_tokenizer(folder, [], {"tokenizer_class": "BiEncoderTokenizer", "query_length": 8, "doc_length": 16,
                                      "backbone_tokenizer_class": "TiteTokenizer", "add_marker_tokens": False})
    generator = torch.Generator().manual_seed(1)
    projection = {"projection.weight": torch.randn(24, 32, generator=generator) / 8,
                  "projection.bias": torch.randn(24, generator=generator)}
    save_file({**authors_tensors(), **projection}, folder / "model.safetensors")
    config = dict(AUTHORS_CONFIG, model_type="lir-dpr", backbone_model_type="tite", architectures=["LirDprTiteModel"],
                  query_length=8, doc_length=16, similarity_function="dot", add_marker_tokens=False, embedding_dim=24,
                  projection="linear", query_pooling_strategy="first", doc_pooling_strategy="first", normalize=False,
                  sparsification=None)
    (folder / "config.json").write_text(json.dumps(config))


def write_condenser_run(folder: Path, bert: str) -> None:
    """A luyug/Condenser output folder: the BERT masked LM and the 2-layer head's ``c_head.N.*`` in model.pt."""
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertLayer

    shutil.copytree(bert, folder)
    config = BertConfig.from_pretrained(folder)
    torch.manual_seed(1)
    head = {f"c_head.{index}.{name}": tensor for index in range(2)
            for name, tensor in BertLayer(config).state_dict().items()}
    torch.save(head, folder / "model.pt")


def write_user_files(cwd: Path, models: dict[str, str]) -> None:
    """The files a reader brings, under the names the docs give them, made from the small data (USER_FILES)."""
    from dense_encoders.data.bm25 import bm25_run
    from dense_encoders.data.retrieval import load_beir
    from dense_encoders.data.runs import write_trec_run

    beir = Path(models["beir"])
    for name in ("msmarco", "scifact", "nfcorpus", "fiqa", "data/msmarco", "data/beir-scifact"):
        shutil.copytree(beir, cwd / name)
    documents = _records(beir, "corpus.jsonl")
    texts = [f"{d['title']} {d['text']}".strip() for d in documents]
    (cwd / "wiki-bookcorpus.txt").write_text("\n".join(texts) + "\n")
    for name in ("msmarco-spans.jsonl", "fineweb-edu.jsonl", "corpus.jsonl"):
        (cwd / name).write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    (cwd / "collection.tsv").write_text("".join(f"{d['_id']}\t{text}\n" for d, text in zip(documents, texts)))
    queries = {q["_id"]: q["text"] for q in _records(beir, "queries.jsonl")}
    dev = {line.split("\t")[0] for line in (beir / "qrels" / "dev.tsv").read_text().splitlines()[1:]}
    (cwd / "queries.dev.small.tsv").write_text("".join(f"{q}\t{queries[q]}\n" for q in sorted(dev)))
    # STSB's layout: a query and its judged passage score 5, a query and an unrelated passage 0
    pairs = ["sentence1\tsentence2\tscore"]
    qrels = [line.split("\t") for line in (beir / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    by_id = dict(zip((d["_id"] for d in documents), texts))
    for number, (query, document, _) in enumerate(qrels):
        pairs += [f"{queries[query]}\t{by_id[document]}\t5.0", f"{queries[query]}\t{texts[number * 7 % 60]}\t0.0"]
    (cwd / "stsbenchmark.tsv").write_text("\n".join(pairs) + "\n")
    write_trec_run(bm25_run(load_beir(cwd / "msmarco", split="train"), k=8), cwd / "msmarco-train-top100.trec")
    write_authors_folder(cwd / "tite-2-late")
    write_lightning_ir_folder(cwd / "lir-tite-msmarco")
    write_condenser_run(cwd / "condenser-run", models["bert"])


# what earlier commands of other pages made, for pages that start from them
PREREQUISITES = {
    "large-corpora.md": ["runs/tite-msmarco"],  # the TITE the README's fine-tuning wrote
    # a distilled TITE and its results
    "hub.md": ["runs/tite-2-late-msmarco", "eval/trec-dl-19.json", "eval/scifact.json"],
}
# blocks that are an alternative to an earlier one of their page (the same output folders): run in a new folder
ALTERNATIVES = {"cross-encoders.md#1": "the paper's setting with Hub models, instead of the block before"}


def write_prerequisites(page: str, cwd: Path, models: dict[str, str]) -> None:
    from dense_encoders.cli import main
    from dense_encoders.data.distillation import run_to_training_file
    from dense_encoders.data.retrieval import load_beir
    from dense_encoders.evaluation import evaluate_retrieval

    for name in PREREQUISITES.get(page, ()):
        path = cwd / name
        if name == "runs/tite-msmarco":
            shutil.copytree(models["tite"], path)
        elif name.startswith("runs/"):
            queries = load_beir(cwd / "msmarco", split="train").queries
            run_to_training_file(cwd / "msmarco-train-top100.trec", cwd / "scores.jsonl", queries=queries, top_k=8)
            assert main(["distill", "--student", models["tite"], "--train-file", str(cwd / "scores.jsonl"),
                         "--corpus", str(cwd / "msmarco"), "--output-dir", str(path), "--max-steps", "1",
                         "--per-device-train-batch-size", "2"]) == 0
        else:
            model = cwd / PREREQUISITES[page][0]
            evaluate_retrieval(str(model), models["beir"], output=path, no_progress=True)


@pytest.fixture(scope="module")
def models(tmp_path_factory, tok) -> dict[str, str]:
    from transformers import BertForMaskedLM, BertForSequenceClassification

    root = tmp_path_factory.mktemp("docs-models")
    return {
        "bert": _save_bert(root / "bert", tok, BertForMaskedLM, num_hidden_layers=12),
        "cross_encoder": _save_bert(root / "cross-encoder", tok, BertForSequenceClassification),
        "dual_encoder": _save_sentence_transformer(root / "dual-encoder", tok, num_layers=2),
        # the quickstart's teacher: the shape of the tiny-tite-2-late preset, which it warm-starts
        "teacher": _save_sentence_transformer(root / "teacher", tok, num_layers=5),
        "tite": _save_tite(root / "tite", tok),
        "beir": str(write_small_beir(root / "small-beir")),
    }


def serve_hub_datasets(hub, beir: Path) -> None:
    """HUB_DATASETS on ``hub``, each the small BEIR folder ``beir`` in BEIR's Hub layout."""
    from huggingface_hub import CommitOperationAdd, HfApi

    api = HfApi(endpoint=hub.endpoint, token=hub.token)
    for repo_id in HUB_DATASETS:
        parts = {
            repo_id: {f"{name}.gz": gzip.compress((beir / name).read_bytes()) for name in ("corpus.jsonl",
                                                                                          "queries.jsonl")},
            f"{repo_id}-qrels": {path.name: path.read_bytes() for path in sorted((beir / "qrels").glob("*.tsv"))},
        }
        for repository, files in parts.items():
            api.create_repo(repository, repo_type="dataset")
            api.create_commit(repository, repo_type="dataset", commit_message="add the small data",
                              operations=[CommitOperationAdd(name, data) for name, data in files.items()])


@contextlib.contextmanager
def loopback_hub(models: dict[str, str], cache: Path):
    """The loopback Hub (``push`` goes there) serving HUB_DATASETS, with a Hugging Face cache at ``cache``."""
    from hub_server import LoopbackHub
    from huggingface_hub import constants

    saved = constants.HF_HUB_CACHE
    with LoopbackHub(token=HUB_TOKEN) as hub, hub.in_process():
        constants.HF_HUB_CACHE = str(cache)
        try:
            serve_hub_datasets(hub, Path(models["beir"]))
            yield {**models, "hub": hub.endpoint}
        finally:
            constants.HF_HUB_CACHE = saved


# ------------------------------------------------------------------------------------------ the test


BLOCKS = {page.name: code_blocks(page) for page in PAGES}


@pytest.mark.slow
@pytest.mark.parametrize("page", [page.name for page in PAGES])
def test_every_block_of_the_page_runs_as_written(page, models, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_user_files(tmp_path, models)
    write_prerequisites(page, tmp_path, models)
    names_hub_data = any(repo_id in block.text for block in BLOCKS[page] for repo_id in HUB_DATASETS)
    hub = (loopback_hub(models, tmp_path / "hf-cache") if page == "hub.md" or names_hub_data
           else contextlib.nullcontext(models))
    with hub as models:
        for block in BLOCKS[page]:
            if block.id in ALTERNATIVES:
                (tmp_path / block.id).mkdir()
                monkeypatch.chdir(tmp_path / block.id)
                write_user_files(tmp_path / block.id, models)
            if block.language in ("bash", "sh", "shell", ""):
                run_shell_block(block, models, capsys)
            elif block.language == "python":
                namespace = run_python_block(block, models)
                check_stated_facts(block, namespace)
            elif block.language == "json":
                check_json_block(block, models)
            else:
                pytest.fail(f"{block.id}: a ```{block.language} block, which this test does not know how to run")


def check_stated_facts(block: Block, namespace: dict) -> None:
    """What a Python block's comments state: ``SentenceTransformer`` gives "the same vectors" as ``pooler_output``."""
    import numpy as np

    if "the same vectors" not in block.text:
        return
    for model, vectors in (("model", "vectors"), ("encoder", "embeddings")):
        if model in namespace and vectors in namespace and "tokenizer" in namespace:
            text = re.search(r"encode\(\[\"([^\"]+)\"\]\)", block.text)[1]
            with torch.no_grad():
                direct = namespace[model](**namespace["tokenizer"]([text], return_tensors="pt")).pooler_output
            depth = namespace[model].config.num_hidden_layers
            np.testing.assert_allclose(namespace[vectors], direct.numpy(), rtol=0,
                                       atol=float32_atol(direct, depth=depth), err_msg=block.id)


def check_json_block(block: Block, models: dict[str, str]) -> None:
    """A JSON block of the distillation page is a line of the training file: it reads as one."""
    from dense_encoders.data.distillation import read_training_file

    path = Path("block.jsonl")
    path.write_text(block.text)
    corpus = {doc_id: {"title": "", "text": f"text of {doc_id}"} for doc_id in json.loads(block.text)["document_ids"]}
    assert read_training_file(path, corpus=corpus), block.id


def test_the_tables_name_only_what_the_docs_contain():
    """Every substitution still matches a doc token, so the tables shrink as the docs change."""
    text = "\n".join(block.text for blocks in BLOCKS.values() for block in blocks)
    tokens = set(re.findall(r"[^\s\"'()\[\]]+", text))
    unused = [name for name in (*MODELS, *DATA, *HUB_DATASETS) if name not in tokens]
    assert not unused, f"substitutions no doc block uses: {unused}"
    ids = {block.id for blocks in BLOCKS.values() for block in blocks}
    assert EACH_OPTION <= ids and set(ALTERNATIVES) <= ids and set(PREREQUISITES) <= set(BLOCKS)
    commands = {shlex.split(TORCHRUN.sub("dense-encoders ", c))[1] for blocks in BLOCKS.values() for block in blocks
                if block.language == "bash" for c in shell_commands(block) if "dense-encoders" in c}
    assert {key.split()[0] for key in SIZES} <= commands


@pytest.mark.slow
def test_the_distillation_example_ends_cleanly_when_no_loss_was_logged(minilm_path, tmp_path):
    """docs/distillation.md's `python examples/distill_scifact.py`, on the small data for one step (fewer than its
    10 logging steps): before, it printed its table and then ended in IndexError."""
    from conftest import cpu_only_env

    beir = write_small_beir(tmp_path / "beir")
    work = tmp_path / "work"
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "examples" / "distill_scifact.py"), "--data", str(beir),
         "--work-dir", str(work), "--top-k", "8", "--epochs", "1", "--batch-size", "16"],
        cwd=tmp_path, env=cpu_only_env(), capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    table = (work / "summary.md").read_text().splitlines()
    assert len(table) == 5 and table[0].startswith("| model | nDCG@10")
    lines = result.stdout.splitlines()
    assert lines[lines.index(table[0]):lines.index(table[0]) + 5] == table
    state = json.loads((work / "student" / "trainer_state.json").read_text())
    assert state["global_step"] == 1 and not [entry for entry in state["log_history"] if "loss" in entry]
    assert lines[-1].startswith("training: ") and "1 steps, no loss logged (1 steps, one log every 10)" in lines[-1]
