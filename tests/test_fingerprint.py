"""fingerprint: equal to the noleak package's noleak-fp-v1 for the same texts."""

from __future__ import annotations

import json
import random

import pandas as pd
import pytest
from conftest import write_jsonl

from leakcheck_spark.fingerprint import normalize_series, short

noleak = pytest.importorskip("noleak")

TRICKY = [
    "Hello  World", "hello world", "  HELLO\tWORLD\n", "ﬁle ＡＢＣ ①",  # compatibility forms
    "Straße", "STRASSE", "straße", "e\u0301", "\u00e9", "a\u00a0b", "a\u2003\u2003b",
    "", "   ", "x", "x", "def f(x):\n    return x  # c", "数据 集", "🙂 smile",
]


def random_texts(seed: int, n: int) -> list[str]:
    rnd = random.Random(seed)
    pieces = ["int", "Foo", "ＡＢ", "ß", "\t", "  ", "\u00a0", "é", "e\u0301", "ﬁ", "x=1;", "\n"]
    return [" ".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 8))) for _ in range(n)]


def test_normalisation_is_noleaks():
    from noleak.normalize import normalize

    texts = TRICKY + random_texts(1, 300)
    assert normalize_series(pd.Series(texts)).tolist() == [normalize(t) for t in texts]
    # Every code point, alone and in runs, between words: str.split() is noleak's \s+ and strip.
    every = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    texts = [" x".join(every), "".join(c * 2 + "y" for c in every), "\x1c a\x1f\x85b\u3000 "]
    assert normalize_series(pd.Series(texts)).tolist() == [normalize(t) for t in texts]


def _expected(texts: list[str]) -> dict:
    fp = noleak.fingerprint(texts)
    return {"fingerprint": short(fp.digest), "digest": fp.digest, "n_examples": fp.n_examples,
            "n_unique": fp.n_unique}


def test_fingerprints_equal_noleaks_per_group_and_dataset(cli, tmp_path):
    a = TRICKY + random_texts(2, 500)
    b = random_texts(3, 400) + TRICKY[:5]
    shuffled = a[:]
    random.Random(4).shuffle(shuffled)
    write_jsonl(tmp_path / "a.jsonl", [{"t": t} for t in a])
    write_jsonl(tmp_path / "b" / "part1.jsonl", [{"t": t} for t in b[:200]])
    write_jsonl(tmp_path / "b" / "part2.jsonl", [{"t": t} for t in b[200:]])
    write_jsonl(tmp_path / "shuffled.jsonl", [{"t": t} for t in shuffled + a[:50]])
    args = ["-d", f"x:train={tmp_path / 'a.jsonl'}", "-d", f"x:test={tmp_path / 'b'}",
            "-d", f"y={tmp_path / 'shuffled.jsonl'}", "--text-field", "t", "--quiet"]
    rc, out, err = cli("fingerprint", *args, "--json", tmp_path / "fp.json")
    assert rc == 0, err
    got = json.loads((tmp_path / "fp.json").read_text())
    assert got["fingerprints"] == {"x/test": _expected(b), "x/train": _expected(a),
                                   "y/all": _expected(shuffled + a[:50])}
    # Order and repeats do not change it.
    assert got["fingerprints"]["y/all"]["digest"] == got["fingerprints"]["x/train"]["digest"]
    assert got["fingerprints"]["x/train"]["fingerprint"] in out
    rc, _, err = cli("fingerprint", *args, "--by", "dataset", "--json", tmp_path / "fp2.json")
    assert rc == 0, err
    by_dataset = json.loads((tmp_path / "fp2.json").read_text())["fingerprints"]
    assert by_dataset == {"x": _expected(a + b), "y": _expected(shuffled + a[:50])}


def test_lines_end_at_a_lone_carriage_return_as_in_noleak(cli, tmp_path):
    # noleak reads files with universal newlines: "\r", "\r\n" and "\n" all end a line.
    from noleak.io import load_texts

    (tmp_path / "a.txt").write_bytes(b"alpha one\rbeta two\r\ngamma\r\r  \rdelta\n\repsilon")
    (tmp_path / "b.jsonl").write_bytes(b'{"text": "x y"}\r{"text": "z"}\r\n"w"\r\r"v"\n')
    for name in ("a.txt", "b.jsonl"):
        rc, _, err = cli("fingerprint", "-d", f"d={tmp_path / name}", "--quiet",
                         "--json", tmp_path / "fp.json")
        assert rc == 0, err
        got = json.loads((tmp_path / "fp.json").read_text())["fingerprints"]["d/all"]
        texts = load_texts(tmp_path / name)
        assert got == _expected(texts) and got["n_examples"] == len(texts) >= 4


def test_an_audit_report_holds_the_fingerprints(cli, tmp_path):
    texts = TRICKY + random_texts(5, 100)
    write_jsonl(tmp_path / "a.jsonl", [{"t": t} for t in texts])
    rc, out, err = cli("audit", "-d", f"a:test={tmp_path / 'a.jsonl'}", "--text-field", "t",
                       "--max-chars", "3", "--quiet", "--json", "-")
    assert rc == 0, err
    report = json.loads(out)
    # The whole texts, whatever --max-chars does to matching.
    assert report["fingerprints"] == {"a/test": _expected(texts)}
    assert "fingerprints" in report["timings"]


def test_large_groups_stream_in_order(spark):
    """Many partitions and chunks: the digest is still noleak's."""
    from leakcheck_spark.fingerprint import digest_column, fingerprints

    texts = random_texts(6, 20_000) + [f"t{i}" for i in range(20_000)]
    df = spark.createDataFrame([(("g1" if i % 3 else "g0"), t) for i, t in enumerate(texts)],
                               "group string, text string").repartition(7)
    got = fingerprints(df.withColumn("fp", digest_column()))
    want = {g: _expected([t for i, t in enumerate(texts) if ("g1" if i % 3 else "g0") == g])
            for g in ("g0", "g1")}
    assert got == want


def test_hex_lines_read_binary_and_large_binary_digests_sliced_or_not():
    # Under spark.sql.execution.arrow.useLargeVarTypes the digests arrive as large_binary, whose
    # offsets are int64: reading them as int32 took the wrong bytes of a sliced batch.
    import hashlib

    import pyarrow as pa

    from leakcheck_spark.fingerprint import hex_lines

    digests = [hashlib.sha256(str(i).encode()).digest() for i in range(7)]
    want = b"".join(d.hex().encode() + b"\n" for d in digests[3:6])
    for kind in (pa.binary(), pa.large_binary()):
        arr = pa.array(digests, kind).slice(3, 3)
        assert hex_lines(arr).tobytes() == want, kind
