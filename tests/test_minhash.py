"""Shingle hashing and MinHash signatures: equal to the reference definitions and to datasketch."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from datasketch import MinHash

from leakcheck_spark import minhash as mh
from leakcheck_spark.normalize import tokens


def corpus(n: int = 300, seed: int = 3) -> list[list[str]]:
    """Token lists of varied shape: real code, random code-like texts, short and empty ones."""
    rnd = random.Random(seed)
    words = ["int", "x", "return", "(", ")", "{", "}", ";", "if", "a", "b", "+", "=", "ключ",
             "for", "i", "<", "n", "self", ".", "def", ":"]
    out = [tokens("def f(a, b):\n    return a + b  # add", "code", "python"), [], ["solo"],
           ["a", "b"], ["a", "a", "a", "a", "a", "a", "a"]]
    while len(out) < n:
        out.append([rnd.choice(words) for _ in range(rnd.choice([1, 3, 4, 5, 6, 20, 80, 300]))])
    return out


def texts_of(lists: list[list[str]]) -> list[str]:
    """Texts whose tokens are the lists (tokens joined by spaces tokenise back to themselves)."""
    return [" ".join(toks) for toks in lists]


@pytest.mark.parametrize("min_tokens", [0, 5])  # with texts shorter than K, and without
def test_batch_hashes_are_the_reference_shingle_sets(min_tokens):
    lists = [toks for toks in corpus() if len(toks) >= min_tokens]
    batch = mh.shingle_batch(texts_of(lists), 5)
    assert len(batch) == len(lists)
    for i, toks in enumerate(lists):
        expected = sorted({mh.shingle_hash(s) for s in mh.shingles(toks, 5)})
        assert batch.get(i).tolist() == expected


def test_a_shingle_longer_than_every_text_costs_what_the_longest_text_costs():
    import signal

    lists = corpus()
    longest = max(len(toks) for toks in lists)

    def too_slow(*_):
        raise TimeoutError("hashing looped K times, not the longest text's token count")

    old = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(30)
    try:
        huge = mh.shingle_batch(texts_of(lists), 2**31 - 1)
        grams = mh.word_grams(texts_of(lists), 2**31 - 1)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    # Every text is shorter than K: one shingle of all its tokens, as with any K >= its length.
    for i, toks in enumerate(lists):
        assert huge.get(i).tolist() == ([mh.shingle_hash(toks)] if toks else [])
    same = mh.shingle_batch(texts_of(lists), longest)
    assert np.array_equal(huge.hashes, same.hashes) and np.array_equal(huge.offsets, same.offsets)
    assert np.array_equal(grams.offsets, mh.word_grams(texts_of(lists), longest).offsets)


# Texts that exercise the byte tokenizer: word runs at text edges, ASCII punctuation and control
# characters, whitespace the regex knows (\x1c-\x1f, NBSP), non-ASCII words and symbols.
TRICKY = [
    "", None, "a", "(", "_a1 b_2", "x\x00y\x1cz\x1f w", "a\tb\nc\rd\x0be\x0cf",
    "caf\u00e9 au lait \u2192 x", "\u043a\u043b\u044e\u0447 = 1; // \u043a\u043e\u043c",
    "x\u00a0y", "\u3000", "int main() { return 0; } /* c */", "# py\nx = 'a#b'  # c",
    "a" * 300, "if(a==b){c+=1;}" * 40, "\U0001f600 emoji", "tab\tsep",
]


@pytest.mark.parametrize("normalizer,lang", [("whitespace", "c"), ("exact", "c"),
                                             ("code", "c"), ("code", "python")])
@pytest.mark.parametrize("max_chars", [None, 1, 7, 40])
def test_arrow_fast_path_equals_regex_tokens(normalizer, lang, max_chars):
    rnd = random.Random(5)
    texts = TRICKY + ["".join(rnd.choice(TRICKY[2:]) for _ in range(rnd.randint(1, 4)))
                      for _ in range(200)]
    for arr in (pa.array(texts, pa.string()), pa.array(texts, pa.large_string()).slice(3)):
        values = arr.to_pylist()
        batch = mh.shingle_batch(arr, 3, normalizer, lang, max_chars)
        assert len(batch) == len(values)
        for i, text in enumerate(values):
            toks = tokens(text, normalizer, lang, max_chars) if text is not None else []
            expected = sorted({mh.shingle_hash(s) for s in mh.shingles(toks, 3)})
            assert batch.get(i).tolist() == expected, (i, text)


def test_chunked_batches_equal_one_chunk(monkeypatch):
    texts = texts_of(corpus(150))
    whole = mh.shingle_batch(pa.array(texts), 5)
    monkeypatch.setattr(mh, "_CHUNK_BYTES", 50)
    monkeypatch.setattr(mh, "_POWERS", {})
    small = mh.shingle_batch(pa.array(texts), 5)
    assert np.array_equal(whole.hashes, small.hashes)
    assert np.array_equal(whole.offsets, small.offsets)
    # Texts longer than a chunk were hashed with powers of their own, not kept for the worker.
    assert max(len(t) for t in texts) > 50 and len(mh._POWERS["q"]) <= 50


@pytest.mark.parametrize("chunk", [1, 16, 64, 1000])
def test_texts_longer_than_a_chunk_are_hashed_in_pieces_with_the_same_windows(monkeypatch,
                                                                             chunk):
    rnd = random.Random(11)
    texts = ["".join(rnd.choice(TRICKY[2:]) for _ in range(60)) for _ in range(6)] + [
        "a" * 3000 + " b c d e f", "x" + "(" * 900, "( ) " * 800, "caf\u00e9 " * 500, "q r", "",
        " " * 300, "\n" * 100 + "z"]
    arr = pa.array(texts)
    expected = [mh.shingle_batch(arr, 5, sets=sets) for sets in (True, False)]
    expected_grams = mh.word_grams(arr, 3)
    for i, text in enumerate(texts):  # (no text is longer than the default chunk)
        want = sorted({mh.shingle_hash(s) for s in mh.shingles(tokens(text, "whitespace"), 5)})
        assert expected[0].get(i).tolist() == want
    monkeypatch.setattr(mh, "_CHUNK_BYTES", chunk)
    for sets, want in zip((True, False), expected):
        got = mh.shingle_batch(arr, 5, sets=sets)
        assert np.array_equal(got.offsets, want.offsets)
        assert np.array_equal(got.hashes, want.hashes)  # the windows in order, without sets
    grams = mh.word_grams(arr, 3)
    assert np.array_equal(grams.offsets, expected_grams.offsets)
    assert np.array_equal(grams.hashes, expected_grams.hashes)


@pytest.mark.parametrize("normalizer,lang", [("whitespace", "c"), ("exact", "c"), ("code", "c")])
@pytest.mark.parametrize("max_chars", [None, 1, 7])
@pytest.mark.parametrize("chunk", [None, 1, 16, 64])
def test_joined_tokens_are_each_texts_tokens_joined_by_spaces(monkeypatch, normalizer, lang,
                                                              max_chars, chunk):
    # The numpy join behind near-matching units (normalize.unit_series) against the regex, on
    # texts of every kind, sliced arrays, chunked batches and texts longer than a chunk.
    rnd = random.Random(7)
    texts = TRICKY + ["".join(rnd.choice(TRICKY[2:]) for _ in range(rnd.randint(1, 5)))
                      for _ in range(150)] + ["( ) " * 40, " " * 30, "\n" * 9 + "z"]
    if chunk is not None:
        monkeypatch.setattr(mh, "_CHUNK_BYTES", chunk)
    for batch in (pa.array(texts, pa.string()), pa.array(texts, pa.large_string()).slice(3),
                  texts[:40]):
        values = batch if isinstance(batch, list) else batch.to_pylist()
        got = [bytes(j) for j in mh.joined_tokens(batch, normalizer, lang, max_chars)]
        assert got == [" ".join(tokens(t, normalizer, lang, max_chars)).encode()
                       for t in values]


@pytest.mark.parametrize("text, size, cuts", [
    ("ab cd ef", 3, [0, 3, 6, 8]), ("abcdef gh", 3, [0, 6, 9]), ("a(b)c", 1, [0, 1, 2, 3, 4, 5]),
    ("abc", 1, [0, 3]), ("ab cd", 10, [0, 5]),
])
def test_long_texts_are_cut_between_tokens(text, size, cuts):
    got = mh._token_cuts(mh._CLASS[np.frombuffer(text.encode(), np.uint8)], size)
    assert got == cuts


def test_unsorted_hashes_give_the_same_signatures():
    texts = pa.array(texts_of(corpus(100)))
    sets, windows = mh.shingle_batch(texts, 5), mh.shingle_batch(texts, 5, sets=False)
    assert windows.sizes().sum() > sets.sizes().sum()  # repeats kept
    assert np.array_equal(mh.signatures(sets, 64), mh.signatures(windows, 64))


def test_token_hash_is_bytewise():
    assert mh.token_hash("ab") != mh.token_hash("ba")
    assert mh.token_hash("a") != mh.token_hash("a\x00")  # the length is part of the hash
    assert mh.token_hash("\u00e9") != mh.token_hash("e")


def test_set_jaccard_equals_jaccard_of_shingle_tuples():
    lists = corpus(80)
    batch = mh.shingle_batch(texts_of(lists), 3)
    for i in range(0, 80, 7):
        for j in range(1, 80, 11):
            a, b = set(mh.shingles(lists[i], 3)), set(mh.shingles(lists[j], 3))
            if not a or not b:
                continue
            ha, hb = batch.get(i), batch.get(j)
            inter = len(np.intersect1d(ha, hb, assume_unique=True))
            assert inter / (len(ha) + len(hb) - inter) == len(a & b) / len(a | b)


@pytest.mark.parametrize("scheme", ["affine32", "legacy"])
@pytest.mark.parametrize("num_perm,seed", [(128, 1), (64, 7)])
def test_signatures_equal_datasketch(scheme, num_perm, seed):
    lists = corpus()
    sig = mh.signatures(mh.shingle_batch(texts_of(lists), 5), num_perm, seed, scheme)
    assert sig.shape == (len(lists), num_perm) and sig.dtype == np.uint32
    for i, toks in enumerate(lists):
        m = MinHash(num_perm=num_perm, seed=seed, scheme=scheme, hashfunc=mh.shingle_hash32)
        for s in mh.shingles(toks, 5):
            m.update(" ".join(s))
        assert sig[i].tolist() == m.hashvalues.astype(np.uint64).tolist(), i


@pytest.mark.parametrize("block", [7, 1])
def test_signatures_do_not_depend_on_block_size(monkeypatch, block):
    lists = corpus(120)
    batch = mh.shingle_batch(texts_of(lists), 5)
    whole = mh.signatures(batch, 32)
    # Blocks smaller than most texts: every text is cut, some into one block a shingle.
    monkeypatch.setattr(mh, "_WORK_VALUES", 32 * block)
    assert np.array_equal(mh.signatures(batch, 32), whole)


def test_permutations_are_datasketchs():
    for scheme in mh.SCHEMES:
        a, b = mh.permutations(16, 5, scheme)
        ref = MinHash(num_perm=16, seed=5, scheme=scheme).permutations
        assert a.tolist() == ref[0].tolist() and b.tolist() == ref[1].tolist()
    with pytest.raises(ValueError, match="scheme"):
        mh.permutations(4, 1, "affine64")
