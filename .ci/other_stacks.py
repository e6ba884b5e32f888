"""The stacks Hub users have beside ours (transformers 4.x, sentence-transformers 3.4 and 5.x, optimum's ONNX
backend): virtual environments that see the main environment's packages (torch, numpy, ...) and install only the
versions that differ, so nothing of the main environment changes. ``tests/test_other_stacks.py`` loads our folders
in each (without the dense_encoders package) and compares the vectors with ours.

    python .ci/other_stacks.py DIR    # creates DIR/<stack>; prints the value for DENSE_ENCODERS_OTHER_STACKS
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

# name -> what pip installs there; datasets < 4.1: the main environment's datasets needs huggingface_hub >= 1,
# which transformers 4.x refuses, and sentence-transformers imports datasets; torch stays the main environment's
# (optimum-intel would pull a newer one); optimum-onnx 0.1 and optimum-intel 1.27: the last of each for transformers
# 4.x, the backends of SentenceTransformer(..., backend="onnx" | "openvino")
KEEP = ["torch==2.13.0"]
STACKS = {
    "transformers-4.53-st-3.4": ["transformers==4.53.3", "sentence-transformers==3.4.1", "datasets<4.1", *KEEP],
    "transformers-4.57-st-5.7-backends": ["transformers==4.57.6", "sentence-transformers==5.7.0", "datasets<4.1",
                                          "optimum-onnx[onnxruntime]==0.1.0", "optimum-intel[openvino]==1.27.0",
                                          *KEEP],
}


def main(folder: str) -> None:
    pythons = []
    for name, requirements in STACKS.items():
        target = Path(folder) / name
        venv.EnvBuilder(system_site_packages=True, with_pip=True).create(target)
        python = target / ("Scripts" if os.name == "nt" else "bin") / "python"
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        *requirements], check=True)
        pythons.append(str(python))
    print(os.pathsep.join(pythons))


if __name__ == "__main__":
    main(sys.argv[1])
