"""Fetches transformers' common model tests into the user cache, for ``tests/test_transformers_common.py``:

    python tests/transformers_common/fetch.py

transformers' ``ModelTesterMixin`` (``tests/test_modeling_common.py``) and ``ConfigTester``
(``tests/test_configuration_common.py``) are not in its wheel; its source distribution holds them. This script
downloads the source distribution of the INSTALLED transformers version with pip (``pip download --no-deps
--no-binary :all:``), takes those two files out, and keeps them, with the sdist's name and SHA-256, in
``<cache>/transformers-<version>/``, where ``<cache>`` is ``$DENSE_ENCODERS_TRANSFORMERS_TESTS``, else
``$XDG_CACHE_HOME/dense-encoders/transformers-tests`` (``~/.cache/...``): outside the repository, and not under
``HF_HOME``, which the tests point at a scratch folder. The folder appears whole or not at all (written beside,
then renamed). Run again, it does nothing. The tests use no network: they read the folder, and skip, naming this
command, without it; ``.ci/run`` runs it before the tests.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib.metadata import version as installed_version
from pathlib import Path

COMMAND = "python tests/transformers_common/fetch.py"
FILES = ("test_modeling_common.py", "test_configuration_common.py")  # of the sdist's tests/ folder
SOURCE_RECORD = "source.json"
# transformers' tests/ is a package in its repository (tests/test_configuration_common.py imports transformers
# through it, `direct_transformers_import(Path(__file__).parent)`); the sdist has no tests/__init__.py
PACKAGE_INIT = "# stand-in for transformers' tests/__init__.py, which its source distribution lacks\n"


def cache_root() -> Path:
    """The folder that holds one ``transformers-<version>/`` folder per fetched version."""
    if os.environ.get("DENSE_ENCODERS_TRANSFORMERS_TESTS"):
        return Path(os.environ["DENSE_ENCODERS_TRANSFORMERS_TESTS"]).expanduser()
    user_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return user_cache / "dense-encoders" / "transformers-tests"


def sources_folder(version: str | None = None) -> Path:
    """Where the common tests of transformers ``version`` (default: the installed one) are kept."""
    return cache_root() / f"transformers-{version or installed_version('transformers')}"


def is_fetched(folder: Path) -> bool:
    return all((folder / name).is_file() for name in (*FILES, "__init__.py", SOURCE_RECORD))


def fetch(version: str | None = None) -> Path:
    """The folder of ``version``'s common tests, downloaded and extracted first where it is not there yet."""
    version = version or installed_version("transformers")
    folder = sources_folder(version)
    if is_fetched(folder):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{folder.name}-") as scratch:
        download = Path(scratch) / "download"
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--quiet",
                   "--dest", str(download), f"transformers=={version}"]
        result = subprocess.run(command, capture_output=True, text=True)
        archives = sorted(download.glob(f"transformers-{version}.tar.gz")) if result.returncode == 0 else []
        if not archives:
            raise SystemExit(f"{COMMAND}: pip could not download the transformers {version} source distribution "
                             f"({' '.join(command[1:])}): {(result.stderr or result.stdout).strip()[-500:]}")
        staged = Path(scratch) / "staged"
        staged.mkdir()
        with tarfile.open(archives[0]) as archive:
            for name in FILES:
                member = archive.extractfile(f"transformers-{version}/tests/{name}")
                (staged / name).write_bytes(member.read())
        (staged / "__init__.py").write_text(PACKAGE_INIT)
        digest = hashlib.sha256(archives[0].read_bytes()).hexdigest()
        (staged / SOURCE_RECORD).write_text(json.dumps({"sdist": archives[0].name, "sha256": digest}) + "\n")
        if folder.exists():  # a partial folder from elsewhere: replaced by the complete one
            shutil.rmtree(folder)
        os.replace(staged, folder)
    return folder


if __name__ == "__main__":
    print(fetch())
