"""Shingles and MinHash signatures over whole batches of texts, in numpy (SPEC sections 4-5).

Everything here is plain numpy, runs inside Spark's Python workers on Arrow batches, and is
unit-tested without Spark.  No Python loop runs per token or per shingle: a batch of texts is one
UTF-8 byte buffer (Arrow's own, zero-copy, for ASCII texts), tokens are found by classifying its
bytes, and token hashes, shingle hashes, set de-duplication and signatures are array operations
over the whole batch.

Tokens are ``\\w+|[^\\w\\s]`` (SPEC section 4).  For ASCII text that is exactly: runs of
``[0-9A-Za-z_]`` bytes, and every other non-whitespace byte alone.  A text with non-ASCII
characters (or any text under the ``code`` normaliser, whose comments are stripped in Python) is
tokenised by the regular expression instead and its tokens re-joined by single spaces; in that
buffer every non-ASCII byte counts as a word byte, which splits it back into the same tokens
(tokens hold no whitespace).  Both paths give the same tokens, so the same hashes.

Token hash.  A polynomial over the token's UTF-8 bytes, then a 64-bit finaliser:

    tok(u_1 .. u_n) = fmix64( (sum_i (u_i + 1) * Q^(n - i)  mod 2^64)  XOR  n * C )

With prefix sums of ``(u_j + 1) * Q^-j`` over the buffer (Q is odd, so invertible mod 2^64), the
hash of every token is one subtraction and one multiplication, whatever its length.

Shingle hash.  A shingle is a run of K consecutive tokens (a text with fewer than K tokens, but at
least one, is one shingle of all its tokens).  Its 64-bit hash is

    h(t_1 .. t_L) = fmix64( sum_j  tok(t_j) * M^(L - j)  (mod 2^64)  XOR  L )

so the hashes of all windows come from K shifted multiply-adds over the batch's token hashes.
:func:`token_hash` and :func:`shingle_hash` are the same definitions for one token and one shingle,
in plain Python (the references the vectorised code is tested against).  Shingle *sets* (for exact
Jaccard verification) are the sorted unique 64-bit hashes of a text; two different shingles
collide with probability ~2^-64 per pair.  (Polynomial hashes mod 2^64 can be made to collide on
purpose; on real text that does not happen.)

MinHash.  Signatures follow ``datasketch.MinHash`` bit for bit, given the same 32-bit shingle hash
(the low 32 bits of ours, :func:`shingle_hash32`): the permutation parameters are drawn exactly as
datasketch draws them from ``numpy.random.RandomState(seed)``, for both its schemes --
``affine32`` (datasketch >= 2.0's default: a MurmurHash3 fmix32 pre-mix, then ``a*h + b`` mod
2^32 with odd ``a``) and ``legacy`` (datasketch < 2.0: ``((a*h + b) mod (2^61 - 1)) & (2^32 - 1)``
with 64-bit wrapping products).  So ``MinHash(num_perm=P, seed=S, scheme=...,
hashfunc=shingle_hash32)`` fed the same shingles holds the same ``hashvalues``.
"""

from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

import numpy as np

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa

TOKEN_RE = re.compile(r"\w+|[^\w\s]")
SCHEMES = ("affine32", "legacy")
DEFAULT_SEED = 1

_M = np.uint64(0x9E3779B97F4A7C15)  # odd multiplier of the rolling shingle hash
_Q = 0xD6E8FEB86659FD93  # odd multiplier of the token hash
_Q_INV = pow(_Q, -1, 1 << 64)
_LEN_MIX = np.uint64(0xC2B2AE3D27D4EB4F)
_MASK64 = (1 << 64) - 1
_MERSENNE = np.uint64((1 << 61) - 1)
_MASK32 = np.uint64((1 << 32) - 1)
# Permuted values computed per signature block (P x shingles): bounds the temporary array to
# 8 MiB (16,384 shingles a block at P = 128) whatever the batch size, texts' lengths or P.
# Measured on 30,000 real functions at P = 128: 8 MiB blocks 0.12 s, 16 MiB 0.13-0.16 s,
# 2 MiB 0.17 s.
_WORK_VALUES = 1 << 21
# Bytes of text tokenised at once: bounds the per-byte temporaries (~40 bytes a byte); a longer
# text is tokenised in pieces of at most this size (:func:`_long_text_windows`).
_CHUNK_BYTES = 1 << 22

# Byte classes of the tokenizer: ASCII as the regular expression sees it (str patterns: \s also
# holds \x1c-\x1f); bytes >= 0x80 only occur in re-joined token buffers, where they are word bytes.
_SPACE, _WORD, _PUNCT = 0, 1, 2
_CLASS = np.array([_WORD if c >= 128 or re.match(r"\w", chr(c)) else
                   _SPACE if re.match(r"\s", chr(c)) else _PUNCT for c in range(256)],
                  dtype=np.uint8)


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


def token_hash(token: str) -> int:
    """The 64-bit hash of one token (the reference definition; see the module docstring).

    >>> token_hash("ab") == token_hash("ab") != token_hash("ba")
    True
    """
    data = token.encode("utf-8", "surrogatepass")
    acc = 0
    for byte in data:
        acc = (acc * _Q + byte + 1) & _MASK64
    mixed = np.array([acc ^ ((len(data) * int(_LEN_MIX)) & _MASK64)], dtype=np.uint64)
    return int(_fmix64(mixed)[0])


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
    """The shingle hashes of a batch of texts: `hashes` (uint64) and `offsets` (text i owns
    ``hashes[offsets[i]:offsets[i + 1]]``; empty for a text with no tokens).  After
    :func:`shingle_batch` with ``sets=True`` each text's hashes are sorted and unique (its set);
    otherwise they are in text order and may repeat (enough for MinHash)."""

    def __init__(self, hashes: np.ndarray, offsets: np.ndarray) -> None:
        self.hashes = hashes
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def get(self, i: int) -> np.ndarray:
        return self.hashes[self.offsets[i]:self.offsets[i + 1]]

    def texts(self, lo: int, hi: int) -> ShingleBatch:
        """Texts lo..hi-1 (no copy; `hi` may run past the end)."""
        offsets = self.offsets[lo:hi + 1]
        return ShingleBatch(self.hashes[offsets[0]:offsets[-1]], offsets - offsets[0])


# --- texts to one byte buffer -------------------------------------------------------------


def _joined_tokens(text: object, normalizer: str, lang: str, max_chars: int | None) -> bytes:
    """The slow path for one text: its tokens joined by single spaces, as UTF-8."""
    from leakcheck_spark.normalize import tokens

    if not isinstance(text, str):
        return b""
    return " ".join(tokens(text, normalizer, lang, max_chars)).encode("utf-8", "surrogatepass")


def arrow_bytes(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(data uint8, offsets int64) of an Arrow string or binary array, zero-copy: value i is
    ``data[offsets[i]:offsets[i + 1]]`` (nulls are whatever bytes Arrow holds, usually none)."""
    import pyarrow as pa

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_string(arr.type):
        arr = arr.cast(pa.large_string())
    elif pa.types.is_binary(arr.type):
        arr = arr.cast(pa.large_binary())
    _, off_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int64)[arr.offset:arr.offset + len(arr) + 1]
    data = (np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None
            else np.zeros(0, dtype=np.uint8))
    return data, offsets


def text_spans(texts: pa.Array | Sequence[str | None], normalizer: str = "whitespace",
               lang: str = "c", max_chars: int | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(buf uint8, starts, ends): the bytes to tokenise; text i is ``buf[starts[i]:ends[i]]``.

    Spans are in text order and do not overlap; bytes outside every span (a truncated tail, a
    null's bytes) are not tokenised.  For an Arrow string array the ASCII texts stay in Arrow's
    own buffer (no copy when every text is ASCII; `max_chars` just shortens spans); the others,
    and all texts under ``code``, take the slow path of :func:`_joined_tokens` and are spliced in.
    A Python sequence takes the slow path for every text (tests and benchmarks).
    """
    def slow(values: list) -> list[bytes]:
        return [_joined_tokens(t, normalizer, lang, max_chars) for t in values]

    return _spans(texts, slow, max_chars, all_slow=normalizer == "code")


def _spans(texts: pa.Array | Sequence[str | None], slow: Callable[[list], list[bytes]],
           max_chars: int | None = None, all_slow: bool = False
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`text_spans` for any tokenisation: ASCII texts as they are, the others (or all, with
    `all_slow`) replaced by ``slow(texts)``, their tokens re-joined by single spaces."""
    import pyarrow as pa

    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if not isinstance(texts, pa.Array) or all_slow:
        pieces = slow(texts.to_pylist() if isinstance(texts, pa.Array) else list(texts))
        offsets = np.zeros(len(pieces) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in pieces], out=offsets[1:])
        return np.frombuffer(b"".join(pieces), dtype=np.uint8), offsets[:-1], offsets[1:]
    n = len(texts)
    if n == 0:
        return np.zeros(0, dtype=np.uint8), np.zeros(0, np.int64), np.zeros(0, np.int64)
    data, offsets = arrow_bytes(texts)
    starts, ends = offsets[:-1].copy(), offsets[1:].copy()
    if texts.null_count:
        null = np.asarray(texts.is_null(), dtype=bool)
        ends[null] = starts[null]
    high = np.flatnonzero(data >= 0x80)  # positions of non-ASCII bytes (few, in sorted order)
    slow_rows = np.flatnonzero(np.searchsorted(high, ends) > np.searchsorted(high, starts))
    if max_chars is not None:  # ASCII: one byte a character (slow texts are cut in Python)
        ends = np.minimum(ends, starts + max_chars)
    if not len(slow_rows):
        return data, starts, ends
    pieces = slow(texts.take(pa.array(slow_rows)).to_pylist())
    old_end = offsets[1:][slow_rows]
    delta = np.array([len(p) for p in pieces], dtype=np.int64) - (old_end - starts[slow_rows])
    shift = np.zeros(n, dtype=np.int64)
    shift[slow_rows] = delta
    shift = np.cumsum(shift) - shift  # texts after a spliced one move by its change in size
    segments, prev = [], 0
    for i, piece in zip(slow_rows, pieces):
        segments += [data[prev:starts[i]], np.frombuffer(piece, dtype=np.uint8)]
        prev = offsets[i + 1]
    segments.append(data[prev:])
    starts = starts + shift
    ends = ends + shift
    ends[slow_rows] = starts[slow_rows] + np.array([len(p) for p in pieces], dtype=np.int64)
    return np.concatenate(segments), starts, ends


# --- tokens and shingle hashes --------------------------------------------------------------

_POWERS: dict[str, np.ndarray] = {}


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(Q^j, Q^-j) mod 2^64 for j < n, cached and grown by doubling up to a chunk's bytes.

    A longer piece (a word longer than a chunk) gets powers of its own, not kept: the cache lives
    as long as the Python worker, and one 100 MB word would otherwise hold 1.6 GB there for good."""
    cached = len(_POWERS.get("q", ()))
    if cached >= n:
        return _POWERS["q"], _POWERS["qinv"]
    size = n if n > _CHUNK_BYTES else min(max(n, 2 * cached, 1024), _CHUNK_BYTES)
    q, qinv = (_cumulative_powers(base, size) for base in (_Q, _Q_INV))
    if size <= _CHUNK_BYTES:
        _POWERS.update(q=q, qinv=qinv)
    return q, qinv


def _cumulative_powers(base: int, size: int) -> np.ndarray:
    p = np.full(size, base, dtype=np.uint64)
    p[0] = 1
    return np.cumprod(p, dtype=np.uint64)  # wraps mod 2^64


def _token_bounds(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                  classes: np.ndarray = _CLASS
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(byte classes, token starts, token ends, tokens per text) of a non-empty buffer: every
    token's bytes are ``buf[start:end]``, in text order; bytes outside every span are spaces."""
    n = len(buf)
    cls = classes[buf]
    if not (starts[0] == 0 and ends[-1] == n and np.array_equal(starts[1:], ends[:-1])):
        edge = np.zeros(n + 1, dtype=np.int64)  # bytes outside every span are not text
        np.add.at(edge, starts, 1)
        np.add.at(edge, ends, -1)
        cls[np.cumsum(edge[:n]) == 0] = _SPACE
    word = cls == _WORD
    begins = np.zeros(n + 1, dtype=bool)  # a text begins here: word runs never cross it
    begins[starts] = True
    begins[n] = True
    prev_word = np.concatenate(([False], word[:-1]))
    next_word = np.concatenate((word[1:], [False]))
    word_start = word & (~prev_word | begins[:n])
    word_last = word & (~next_word | begins[1:])
    tok_start = np.flatnonzero(word_start | (cls == _PUNCT))
    tok_end = tok_start + 1
    tok_end[word[tok_start]] = np.flatnonzero(word_last) + 1
    counts = np.searchsorted(tok_start, ends) - np.searchsorted(tok_start, starts)
    return cls, tok_start, tok_end, counts


def _token_hashes(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                  classes: np.ndarray = _CLASS, fold: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(hashes uint64, counts int64): every token's hash in text order, and tokens per text.
    `classes` gives each byte's class; `fold` (a byte map) is applied before hashing."""
    n = len(buf)
    if n == 0:
        return np.zeros(0, np.uint64), np.zeros(len(starts), np.int64)
    _, tok_start, tok_end, counts = _token_bounds(buf, starts, ends, classes)
    q, qinv = _powers(n)
    prefix = np.zeros(n + 1, dtype=np.uint64)
    values = (buf if fold is None else fold[buf]).astype(np.uint64)
    values += np.uint64(1)  # in place: these arrays are 8 bytes a text byte
    values *= qinv[:n]
    np.cumsum(values, out=prefix[1:])
    poly = (prefix[tok_end] - prefix[tok_start]) * q[tok_end - 1]
    length = (tok_end - tok_start).astype(np.uint64)
    return _fmix64(poly ^ (length * _LEN_MIX)), counts


def joined_tokens(texts: pa.Array | Sequence[str | None], normalizer: str = "whitespace",
                  lang: str = "c", max_chars: int | None = None
                  ) -> Iterator[bytes | memoryview]:
    """Each text's tokens joined by single spaces, as UTF-8 (:func:`_joined_tokens` of every
    text; empty for a null text), in order.

    The same byte buffer and classes as the shingles (:func:`text_spans`), so the regular
    expression runs only on the texts that path sends it: per text, a copy of its non-space bytes
    with a space after each token but the last (~2.5x cheaper than the expression on real code).
    A text longer than a chunk is joined by the expression (its bytes decoded), as one piece.
    """
    buf, starts, ends = text_spans(texts, normalizer, lang, max_chars)
    for lo, hi in _chunks(starts, ends):
        base = starts[lo]
        if hi - lo == 1 and ends[lo] - base > _CHUNK_BYTES:
            text = buf[base:ends[lo]].tobytes().decode("utf-8", "surrogatepass")
            yield " ".join(TOKEN_RE.findall(text)).encode("utf-8", "surrogatepass")
            continue
        part, s, e = buf[base:ends[hi - 1]], starts[lo:hi] - base, ends[lo:hi] - base
        if not len(part):
            yield from (b"" for _ in range(hi - lo))
            continue
        cls, _, tok_end, counts = _token_bounds(part, s, e)
        copies = (cls != _SPACE).astype(np.int64)  # each byte once, a token's last twice
        spaced = np.ones(len(tok_end), dtype=bool)
        spaced[(np.cumsum(counts) - 1)[counts > 0]] = False  # no space after a text's last
        copies[tok_end[spaced] - 1] += 1
        out = np.repeat(part, copies)
        at = np.zeros(len(part) + 1, dtype=np.int64)
        np.cumsum(copies, out=at[1:])
        out[at[tok_end[spaced]] - 1] = ord(" ")
        view = memoryview(out)
        for a, b in zip(at[s].tolist(), at[e].tolist()):
            yield view[a:b]


def _window_hashes(tok: np.ndarray, counts: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(hashes, shingles per text) of every K-token window of every text, in text order."""
    n_texts = len(counts)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    width = np.minimum(counts, k)
    n_sh = np.where(counts >= k, counts - k + 1, (counts > 0).astype(np.int64))
    if not n_sh.sum():
        return np.zeros(0, np.uint64), n_sh
    owner = np.repeat(np.arange(n_texts), n_sh)
    first = np.repeat(starts, n_sh) + (np.arange(n_sh.sum()) - np.repeat(
        np.cumsum(n_sh) - n_sh, n_sh))
    w = width[owner]
    acc = np.zeros(len(first), dtype=np.uint64)
    short = bool(((counts > 0) & (counts < k)).any())  # fewer than K tokens: one shorter window
    # K shifted multiply-adds over all shingles of the batch; past the widest window (a batch
    # of texts all shorter than K) a step would change nothing, so the loop stops there.
    for j in range(int(w.max())):
        if short:
            acc = np.where(j < w, acc * _M + tok[np.minimum(first + j, len(tok) - 1)], acc)
        else:
            acc *= _M
            acc += tok[first + j]
    return _fmix64(acc ^ w.astype(np.uint64)), n_sh


def _chunks(starts: np.ndarray, ends: np.ndarray) -> list[tuple[int, int]]:
    """Ranges of texts spanning at most _CHUNK_BYTES bytes each (or one larger text)."""
    out, i, n = [], 0, len(starts)
    while i < n:
        end = int(np.searchsorted(ends, starts[i] + _CHUNK_BYTES, side="right"))
        end = min(max(end, i + 1), n)
        out.append((i, end))
        i = end
    return out


def _long_text_windows(text: np.ndarray, k: int, classes: np.ndarray,
                       fold: np.ndarray | None) -> np.ndarray:
    """The window hashes of one text longer than a chunk, in order, as :func:`_window_hashes`
    gives them, in bounded temporaries.

    Tokenising a text costs ~40 bytes a byte of it at once (one 64 MB text: ~2.9 GB).  So its
    tokens are hashed piece by piece, cut where no token crosses (a token's hash does not depend
    on where it sits), and its windows are hashed a slice of tokens at a time, each slice carrying
    the K - 1 tokens the next slice's first windows start in.  What stays is 8 bytes a token and
    8 a window."""
    cls = classes[text]
    tok = np.concatenate([_token_hashes(text[a:b], np.zeros(1, np.int64),
                                        np.array([b - a]), classes, fold)[0]
                          for a, b in itertools.pairwise(_token_cuts(cls, _CHUNK_BYTES))])
    del cls
    n = len(tok)
    if n <= k:
        return _window_hashes(tok, np.array([n]), k)[0]
    step = max(1, _CHUNK_BYTES // 8)
    return np.concatenate([_window_hashes(tok[lo:lo + step + k - 1], np.array([
        min(step + k - 1, n - lo)]), k)[0] for lo in range(0, n - k + 1, step)])


def _token_cuts(cls: np.ndarray, size: int) -> list[int]:
    """Offsets that cut a text (its byte classes) into pieces of at most about `size` bytes
    without cutting a token: at a cut, the byte before or the byte after is not a word byte.
    A word longer than that is one piece of its own (cut where it ends)."""
    cuts, n = [0], len(cls)
    while n - cuts[-1] > size:
        target = cuts[-1] + size  # < n
        lo = max(cuts[-1] + 1, target - 4096)
        free = np.flatnonzero((cls[lo - 1:target] != _WORD) | (cls[lo:target + 1] != _WORD))
        if len(free):  # the last place at or before the target
            cuts.append(lo + int(free[-1]))
            continue
        after = cls[target:] != _WORD  # inside a long word: cut where it ends
        cuts.append(target + int(after.argmax()) if after.any() else n)
    if cuts[-1] < n:
        cuts.append(n)
    return cuts


def _unique_per_text(h: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort each text's hashes and drop repeats: (hashes, offsets).

    One small in-place sort per text: ~25x cheaper than a lexsort by (text, hash) over the
    batch, because each sort stays in cache.
    """
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    h = h.copy()
    for lo, hi in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
        if hi - lo > 1:
            h[lo:hi].sort()
    keep = np.ones(len(h), dtype=bool)
    keep[1:] = h[1:] != h[:-1]
    keep[offsets[:-1][sizes > 0]] = True  # a text's first hash is always kept
    kept = np.zeros(len(h) + 1, dtype=np.int64)
    np.cumsum(keep, out=kept[1:])
    return h[keep], kept[offsets]


def shingle_batch(texts: pa.Array | Sequence[str | None], k: int, normalizer: str = "whitespace",
                  lang: str = "c", max_chars: int | None = None,
                  sets: bool = True) -> ShingleBatch:
    """Hash the shingles of many texts at once (no per-token or per-shingle Python loop).

    With ``sets=True`` each text's hashes are its shingle set (sorted, unique); without, they are
    every window's hash in order, which MinHash needs no more than (and is cheaper).
    """
    return _window_batch(text_spans(texts, normalizer, lang, max_chars), k, sets)


def _window_batch(spans: tuple[np.ndarray, np.ndarray, np.ndarray], k: int, sets: bool,
                  classes: np.ndarray = _CLASS, fold: np.ndarray | None = None) -> ShingleBatch:
    """The K-token window hashes of every span (:func:`_token_hashes` classes and fold)."""
    buf, starts, ends = spans
    parts, sizes = [], []
    for lo, hi in _chunks(starts, ends):
        base = starts[lo]
        if hi - lo == 1 and ends[lo] - base > _CHUNK_BYTES:
            h = _long_text_windows(buf[base:ends[lo]], k, classes, fold)
            n_sh = np.array([len(h)], dtype=np.int64)
        else:
            tok, counts = _token_hashes(buf[base:ends[hi - 1]], starts[lo:hi] - base,
                                        ends[lo:hi] - base, classes, fold)
            h, n_sh = _window_hashes(tok, counts, k)
        parts.append(h)
        sizes.append(n_sh)
    h = np.concatenate(parts) if parts else np.zeros(0, np.uint64)
    size = np.concatenate(sizes) if sizes else np.zeros(0, np.int64)
    if sets:
        return ShingleBatch(*_unique_per_text(h, size))
    offsets = np.zeros(len(size) + 1, dtype=np.int64)
    np.cumsum(size, out=offsets[1:])
    return ShingleBatch(h, offsets)


# --- noleak's word n-grams ------------------------------------------------------------------

# Words are ``\w+`` of the noleak-normalised text: other non-space bytes separate like spaces.
_WORDS_CLASS = np.where(_CLASS == _WORD, _WORD, _SPACE).astype(np.uint8)
# ASCII text under noleak's normalisation: NFKC leaves it as it is and casefold lowercases it.
_ASCII_FOLD = np.arange(256, dtype=np.uint8)
_ASCII_FOLD[ord("A"):ord("Z") + 1] += 32
_WORDS_RE = re.compile(r"\w+")


def noleak_words(text: str | None) -> list[str]:
    r"""noleak's words of one text: ``\w+`` of its noleak-normalised form (the reference).

    >>> noleak_words("  Straße ＡＢ,c_d! ")
    ['strasse', 'ab', 'c_d']
    """
    import pandas as pd

    from leakcheck_spark.fingerprint import normalize_series

    return _WORDS_RE.findall(normalize_series(pd.Series([text], dtype=object))[0])


def _joined_words(values: list) -> list[bytes]:
    import pandas as pd

    from leakcheck_spark.fingerprint import normalize_series

    normalized = normalize_series(pd.Series(values, dtype=object))
    return [" ".join(_WORDS_RE.findall(t)).encode("utf-8", "surrogatepass") for t in normalized]


def word_grams(texts: pa.Array | Sequence[str | None], n: int) -> ShingleBatch:
    """The sets of noleak's word n-grams of many texts, as 64-bit hashes (SPEC section 8).

    An n-gram is n consecutive words; a text with fewer words (but at least one) is one gram of
    all of them; a text without words has none.  A gram's hash is :func:`shingle_hash` of its
    words, so equal grams hash equally in any batch.  ASCII texts are tokenised in place (their
    bytes lowercased on the fly); the others are normalised in Python first.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return _window_batch(_spans(texts, _joined_words), n, True, _WORDS_CLASS, _ASCII_FOLD)


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
    block = max(1, _WORK_VALUES // num_perm)
    # One P x block work array, reused: writing the products into it in place is ~3x faster
    # than fresh temporaries (each would be 8 MiB of new pages per block).
    work = np.empty((num_perm, block), dtype=np.uint32) if scheme == "affine32" else None
    offsets = batch.offsets
    nonempty = np.flatnonzero(batch.sizes() > 0)
    first = offsets[nonempty]
    # Blocks of `block` shingles; a text cut by a block's edge takes the minimum of its parts.
    for lo in range(int(offsets[0]), int(offsets[-1]), block):
        hi = min(lo + block, int(offsets[-1]))
        texts = nonempty[np.searchsorted(first, lo, "right") - 1:np.searchsorted(first, hi)]
        chunk = mixed[lo:hi]
        if scheme == "affine32":
            phv = work[:, :hi - lo]
            np.multiply(a[:, None], chunk[None, :], out=phv)  # wraps mod 2^32, as datasketch
            np.add(phv, b[:, None], out=phv)
        else:
            phv = (((a[:, None] * chunk[None, :] + b[:, None]) % _MERSENNE) & _MASK32
                   ).astype(np.uint32)
        starts = np.maximum(offsets[texts], lo) - lo
        sig[texts] = np.minimum(sig[texts], np.minimum.reduceat(phv, starts, axis=1).T)
    return sig
