"""Shingle hashing and MinHash signatures: equal to the reference definitions and to datasketch."""

from __future__ import annotations

import random

import numpy as np
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


def test_batch_hashes_are_the_reference_shingle_sets():
    lists = corpus()
    batch = mh.shingle_batch(lists, 5)
    assert len(batch) == len(lists)
    for i, toks in enumerate(lists):
        expected = sorted({mh.shingle_hash(s) for s in mh.shingles(toks, 5)})
        assert batch.get(i).tolist() == expected


def test_set_jaccard_equals_jaccard_of_shingle_tuples():
    lists = corpus(80)
    batch = mh.shingle_batch(lists, 3)
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
    sig = mh.signatures(mh.shingle_batch(lists, 5), num_perm, seed, scheme)
    assert sig.shape == (len(lists), num_perm) and sig.dtype == np.uint32
    for i, toks in enumerate(lists):
        m = MinHash(num_perm=num_perm, seed=seed, scheme=scheme, hashfunc=mh.shingle_hash32)
        for s in mh.shingles(toks, 5):
            m.update(" ".join(s))
        assert sig[i].tolist() == m.hashvalues.astype(np.uint64).tolist(), i


def test_signatures_do_not_depend_on_block_size(monkeypatch):
    lists = corpus(120)
    batch = mh.shingle_batch(lists, 5)
    whole = mh.signatures(batch, 32)
    monkeypatch.setattr(mh, "_BLOCK", 7)
    assert np.array_equal(mh.signatures(batch, 32), whole)


def test_permutations_are_datasketchs():
    for scheme in mh.SCHEMES:
        a, b = mh.permutations(16, 5, scheme)
        ref = MinHash(num_perm=16, seed=5, scheme=scheme).permutations
        assert a.tolist() == ref[0].tolist() and b.tolist() == ref[1].tolist()
    with pytest.raises(ValueError, match="scheme"):
        mh.permutations(4, 1, "affine64")
