"""Shingles and MinHash signatures over whole batches of texts, in numpy (SPEC sections 4-5).

Everything here is plain numpy/pandas, runs inside Spark's Python workers on Arrow batches, and is
unit-tested without Spark.  No Python loop runs per shingle: tokens are found per text by one C
regex call, hashed once per *distinct* token of the batch, and shingle hashes, set de-duplication
and signatures are array operations over the whole batch.

Shingle hash.  A shingle is a run of K consecutive tokens (a text with fewer than K tokens, but at
least one, is one shingle of all its tokens).  Its 64-bit hash is

    h(t_1 .. t_L) = fmix64( sum_j  tok(t_j) * M^(L - j)  (mod 2^64)  XOR  L )

where ``tok`` is the first 8 bytes (little endian) of BLAKE2b of the token's UTF-8 and M an odd
64-bit constant: a polynomial rolling hash, so the hashes of all windows come from K shifted
multiply-adds over the batch's token-hash array.  :func:`shingle_hash` is the same definition for
one shingle, in plain Python (the reference the vectorised code is tested against).  Shingle *sets*
(for exact Jaccard verification) are the sorted unique 64-bit hashes of a text; two different
shingles collide with probability ~2^-64 per pair.

MinHash.  Signatures follow ``datasketch.MinHash`` bit for bit, given the same 32-bit shingle hash
(the low 32 bits of ours, :func:`shingle_hash32`): the permutation parameters are drawn exactly as
datasketch draws them from ``numpy.random.RandomState(seed)``, for both its schemes --
``affine32`` (datasketch >= 2.0's default: a MurmurHash3 fmix32 pre-mix, then ``a*h + b`` mod
2^32 with odd ``a``) and ``legacy`` (datasketch < 2.0: ``((a*h + b) mod (2^61 - 1)) & (2^32 - 1)``
with 64-bit wrapping products).  So ``MinHash(num_perm=P, seed=S, scheme=...,
hashfunc=shingle_hash32)`` fed the same shingles holds the same ``hashvalues``.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pandas as pd

TOKEN_RE = re.compile(r"\w+|[^\w\s]")
SCHEMES = ("affine32", "legacy")
DEFAULT_SEED = 1

_M = np.uint64(0x9E3779B97F4A7C15)  # odd multiplier of the rolling shingle hash
_MERSENNE = np.uint64((1 << 61) - 1)
_MASK32 = np.uint64((1 << 32) - 1)
# Columns (shingles) handled per signature block: bounds the P x n temporary array to
# num_perm * _BLOCK * 4 bytes (16 MiB at P = 128) whatever the batch size.
_BLOCK = 32768


def token_hash(token: str) -> int:
    """The 64-bit hash of one token: BLAKE2b of its UTF-8, first 8 bytes little endian."""
    return int.from_bytes(hashlib.blake2b(token.encode("utf-8", "surrogatepass"),
                                          digest_size=8).digest(), "little")


def _fmix64(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xFF51AFD7ED558CCD)
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> np.uint64(33))


def _fmix32(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def shingle_hash(tokens: Sequence[str]) -> int:
    """The 64-bit hash of one shingle (its tokens in order): the reference definition.

    >>> shingle_hash(["a", "b"]) == shingle_hash(["a", "b"]) != shingle_hash(["b", "a"])
    True
    """
    acc = np.zeros(1, dtype=np.uint64)
    for tok in tokens:
        acc = acc * _M + np.uint64(token_hash(tok))
    return int(_fmix64(acc ^ np.uint64(len(tokens)))[0])


def shingle_hash32(shingle: str | bytes) -> int:
    """The 32-bit hash datasketch is given for a shingle written as its tokens joined by one
    space (tokens contain no whitespace): the low 32 bits of :func:`shingle_hash`."""
    if isinstance(shingle, bytes):
        shingle = shingle.decode("utf-8")
    return shingle_hash(shingle.split(" ")) & 0xFFFFFFFF


def shingles(tokens: Sequence[str], k: int) -> list[tuple[str, ...]]:
    """The shingles of a token list (SPEC section 4), as tuples, in order (may repeat).

    >>> shingles(["a", "b", "c"], 2), shingles(["a"], 5), shingles([], 5)
    ([('a', 'b'), ('b', 'c')], [('a',)], [])
    """
    if not tokens:
        return []
    if len(tokens) < k:
        return [tuple(tokens)]
    return [tuple(tokens[i:i + k]) for i in range(len(tokens) - k + 1)]


def permutations(num_perm: int, seed: int = DEFAULT_SEED,
                 scheme: str = "affine32") -> tuple[np.ndarray, np.ndarray]:
    """The (a, b) permutation parameters datasketch.MinHash draws for `num_perm` and `seed`."""
    gen = np.random.RandomState(seed)
    if scheme == "legacy":
        ab = np.array([(gen.randint(1, _MERSENNE, dtype=np.uint64),
                        gen.randint(0, _MERSENNE, dtype=np.uint64)) for _ in range(num_perm)],
                      dtype=np.uint64).T
        return ab[0], ab[1]
    if scheme != "affine32":
        raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    return a, b


class ShingleBatch:
    """The shingle sets of a batch of token lists: `hashes` (uint64, sorted and unique within each
    text) and `offsets` (text i owns ``hashes[offsets[i]:offsets[i + 1]]``; empty for a text with
    no tokens)."""

    def __init__(self, hashes: np.ndarray, offsets: np.ndarray) -> None:
        self.hashes = hashes
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def get(self, i: int) -> np.ndarray:
        return self.hashes[self.offsets[i]:self.offsets[i + 1]]


def shingle_batch(token_lists: Sequence[Sequence[str]], k: int) -> ShingleBatch:
    """Hash the shingle sets of many token lists at once (no per-shingle Python loop)."""
    import pandas as pd

    n_texts = len(token_lists)
    lengths = np.fromiter((len(t) for t in token_lists), dtype=np.int64, count=n_texts)
    flat = [tok for toks in token_lists for tok in toks]
    if not flat:
        return ShingleBatch(np.zeros(0, np.uint64), np.zeros(n_texts + 1, np.int64))
    codes, uniques = pd.factorize(pd.Series(flat, dtype=object), sort=False)
    vocab = np.fromiter((token_hash(u) for u in uniques), dtype=np.uint64, count=len(uniques))
    tok = vocab[codes]
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    # Shingle length per text, and number of shingles per text.
    width = np.minimum(lengths, k)
    counts = np.where(lengths >= k, lengths - k + 1, (lengths > 0).astype(np.int64))
    owner = np.repeat(np.arange(n_texts), counts)
    first = np.repeat(starts, counts) + (np.arange(counts.sum()) - np.repeat(
        np.concatenate(([0], np.cumsum(counts)[:-1])), counts))
    w = width[owner]
    acc = np.zeros(len(first), dtype=np.uint64)
    for j in range(k):  # K shifted multiply-adds over all shingles of the batch
        take = j < w
        acc = np.where(take, acc * _M + tok[np.minimum(first + j, len(tok) - 1)], acc)
    h = _fmix64(acc ^ w.astype(np.uint64))
    # Sets: sort by (text, hash) and drop repeats within a text.
    order = np.lexsort((h, owner))
    h, owner = h[order], owner[order]
    keep = np.ones(len(h), dtype=bool)
    keep[1:] = (h[1:] != h[:-1]) | (owner[1:] != owner[:-1])
    h, owner = h[keep], owner[keep]
    offsets = np.searchsorted(owner, np.arange(n_texts + 1), side="left").astype(np.int64)
    return ShingleBatch(h, offsets)


def signatures(batch: ShingleBatch, num_perm: int, seed: int = DEFAULT_SEED,
               scheme: str = "affine32") -> np.ndarray:
    """MinHash signatures of every text of a batch: a (texts, num_perm) uint32 array.

    A text with no shingles gets all-max values (datasketch's empty MinHash).
    """
    a, b = permutations(num_perm, seed, scheme)
    n = len(batch)
    sig = np.full((n, num_perm), np.iinfo(np.uint32).max, dtype=np.uint32)
    hv32 = (batch.hashes & _MASK32).astype(np.uint32)
    if scheme == "affine32":
        mixed = _fmix32(hv32)
    else:
        mixed = hv32.astype(np.uint64)
    sizes = batch.sizes()
    # Blocks of whole texts, each at most _BLOCK shingles (or one larger text).
    text = 0
    while text < n:
        lo = batch.offsets[text]
        end = int(np.searchsorted(batch.offsets, lo + _BLOCK, side="right")) - 1
        end = max(end, text + 1)
        hi = batch.offsets[end]
        if hi > lo:
            block = mixed[lo:hi]
            if scheme == "affine32":
                phv = a[:, None] * block[None, :] + b[:, None]   # wraps mod 2^32, as datasketch
            else:
                phv = (((a[:, None] * block[None, :] + b[:, None]) % _MERSENNE) & _MASK32
                       ).astype(np.uint32)
            nonempty = np.nonzero(sizes[text:end])[0] + text
            starts = batch.offsets[nonempty] - lo
            sig[nonempty] = np.minimum.reduceat(phv, starts, axis=1).T
        text = end
    return sig


def tokenize_series(texts: pd.Series, normalizer: str, lang: str,
                    max_chars: int | None) -> list[list[str]]:
    """The tokens of every text (SPEC section 4): comment-stripped for ``code``, raw otherwise,
    after truncation; [] for a null text."""
    from leakcheck_spark.normalize import tokens

    return [tokens(t, normalizer, lang, max_chars) if isinstance(t, str) else []
            for t in texts.tolist()]
