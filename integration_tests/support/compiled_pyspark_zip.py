"""Put compiled modules into the running venv's ``pyspark.zip`` (``make venv`` runs this).

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the path of every Python
process it starts (workers, data source planners, streaming source runners, submitted
applications), and ``zipimport`` compiles a zip's modules from source at every import: it
writes no cache. A ``.pyc`` beside each ``.py`` inside the zip is used as it is when it is an
unchecked hash-based pyc (PEP 552). Measured with this venv's interpreter, importing the
worker, the daemon and the streaming source runner takes 0.78 s of CPU from the shipped
zip and 0.34 s from the compiled one; under the suite's load that start-up is what runs
into Spark's fixed 10 s for a worker to connect back.

The zip is rewritten once (a zip that already holds ``.pyc`` files is left alone) through a
temporary file and an atomic rename, so a process reading it never sees half a file.
Usage: ``python -m integration_tests.support.compiled_pyspark_zip``.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import sys
import zipfile
from pathlib import Path

import pyspark

# PEP 552 flags word: bit 0 "hash-based", bit 1 "check the source" (left clear).
_UNCHECKED_HASH_PYC = (1).to_bytes(4, "little")


def pyspark_zip() -> Path:
    """The zip Spark puts on its Python processes' path for this venv's PySpark."""
    return Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip"


def _pyc(source: bytes, filename: str) -> bytes | None:
    """The unchecked hash-based pyc of ``source``, or None if it does not compile."""
    try:
        code = compile(source, filename, "exec", dont_inherit=True)
    except SyntaxError:
        return None
    header = importlib.util.MAGIC_NUMBER + _UNCHECKED_HASH_PYC
    return header + importlib.util.source_hash(source) + marshal.dumps(code)


def compile_zip(path: Path) -> int:
    """Add a compiled module beside every source module of ``path``; return how many."""
    with zipfile.ZipFile(path) as src:
        if any(name.endswith(".pyc") for name in src.namelist()):
            return 0
        tmp = path.with_name(path.name + ".tmp")
        added = 0
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
            for info in src.infolist():
                data = src.read(info)
                dst.writestr(info, data)
                if not info.filename.endswith(".py"):
                    continue
                # Tracebacks then name the same file as zipimport's own compilation would.
                pyc = _pyc(data, f"{path}{os.sep}{info.filename}")
                if pyc is not None:
                    dst.writestr(info.filename + "c", pyc)
                    added += 1
    os.replace(tmp, path)
    return added


def main() -> int:
    path = pyspark_zip()
    if not path.is_file():
        print(f"no {path}: nothing to compile")
        return 0
    added = compile_zip(path)
    print(f"{path}: {added} compiled modules added" if added else f"{path}: already compiled")
    return 0


if __name__ == "__main__":
    sys.exit(main())
