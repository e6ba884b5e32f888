"""Every data file format of the package, for training and evaluation alike, and the collators.

* :mod:`.format`: what every file shares: :class:`DataFormatError` (``file:line``), the JSON-lines
  reader, :func:`~.format.document_record`, the one reader of a corpus line (evaluation, encoding and
  pre-training alike), and :func:`document_text`, the one place where a document (title + text) becomes a string;
* :mod:`.files`: files written atomically and JSON records read back, for every layer;
* :mod:`.retrieval`: BEIR folders (corpus, queries, qrels), TREC qrels, (query, positive) pairs,
  graded sentence pairs (STSB-style),
  :class:`RetrievalDataset`; :mod:`.runs`: TREC runs; :mod:`.bm25`: BM25 runs and hard negatives;
* :mod:`.corpus`: pre-training corpora; :mod:`.masking`, :mod:`.spans`: the pre-training collators;
* :mod:`.distillation`: the distillation training file and its collator.

``trainer/`` and ``evaluation/`` read their files from here; this package imports neither.
"""

from .corpus import SUPPORTED_EXTENSIONS, default_corpus_path, load_corpus, tokenize_for_condenser
from .distillation import DistillationCollator, read_training_file, run_to_training_file
from .format import DataFormatError, document_text
from .masking import WholeWordMaskingCollator
from .retrieval import RetrievalDataset, load_beir, load_dataset_for_evaluation, load_graded_pairs, load_pairs
from .runs import read_trec_run, write_trec_run
from .spans import CoCondenserCollator, add_spans, split_into_spans

__all__ = [
    "SUPPORTED_EXTENSIONS",
    "default_corpus_path",
    "load_corpus",
    "tokenize_for_condenser",
    "WholeWordMaskingCollator",
    "CoCondenserCollator",
    "add_spans",
    "split_into_spans",
    "DataFormatError",
    "DistillationCollator",
    "RetrievalDataset",
    "document_text",
    "load_beir",
    "load_dataset_for_evaluation",
    "load_graded_pairs",
    "load_pairs",
    "read_training_file",
    "read_trec_run",
    "run_to_training_file",
    "write_trec_run",
]
