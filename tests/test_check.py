"""check: eval-vs-train contamination counted as the noleak package counts it (SPEC section 8),
and noleak-style inputs (plain lines, JSON lists of strings, objects without a named field)."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from conftest import spark_conf, write_jsonl

from leakcheck_spark.minhash import noleak_words, shingle_hash, shingles, word_grams

noleak = pytest.importorskip("noleak")
from noleak.io import load_texts  # noqa: E402
from noleak.normalize import words as noleak_words_ref  # noqa: E402
from noleak.overlap import _ngram_ids, exact_overlap, ngram_overlap  # noqa: E402

VOCAB = ["int", "Foo", "bar", "ＡＢ", "ß", "Straße", "café", "e\u0301", "ﬁle", "数据", "x_1",
         "return", "if", "else", "while", "data", "model", "the", "of", "a"]
SEPARATORS = [" ", "  ", "\t", "\u00a0", ", ", "; ", "(", ") ", "\n", "!"]


def random_text(rnd: random.Random, lo: int, hi: int) -> str:
    parts = []
    for _ in range(rnd.randint(lo, hi)):
        parts += [rnd.choice(VOCAB), rnd.choice(SEPARATORS)]
    return "".join(parts)


def reference_grams(text: str, n: int) -> set[int]:
    """Our hashes of noleak's grams of `text`: noleak's words, windowed as SPEC section 8 says."""
    return {shingle_hash(g) for g in shingles(list(noleak_words_ref(text)), n)}


def test_words_and_word_grams_are_noleaks():
    rnd = random.Random(7)
    texts = [random_text(rnd, 0, 30) for _ in range(400)]
    texts += ["", "   ", "!!!", "A", "HELLO   world", "ﬁle ＡＢＣ ①", "a\u2003b", None,
              " ".join(["w"] * 20), "ascii only, with UPPER case and under_scores 123"]
    for t in texts:
        assert noleak_words(t) == list(noleak_words_ref(t or ""))
    for n in (1, 3, 13):
        for batch in (word_grams(pa.array(texts, pa.string()), n), word_grams(texts, n)):
            assert len(batch) == len(texts)
            for i, t in enumerate(texts):
                got = batch.hashes[batch.offsets[i]:batch.offsets[i + 1]]
                assert set(got.tolist()) == reference_grams(t or "", n), (n, t)
                assert len(got) == len(set(got.tolist()))  # a set: sorted and unique
                if noleak_words_ref(t or ""):  # noleak's own count of distinct grams
                    assert len(got) == len(_ngram_ids(t, n))


def planted(seed: int) -> tuple[list[str], list[str], list[str]]:
    """(train_a, train_b, eval): eval records that are copies of train up to noleak's
    normalisation, that share one 13-word window, that share only 12, short texts, repeats."""
    rnd = random.Random(seed)
    train_a = [random_text(rnd, 1, 40) for _ in range(300)]
    train_b = [random_text(rnd, 1, 40) for _ in range(200)] + ["Short text here", "One"]
    ev = [random_text(rnd, 1, 30) for _ in range(150)]
    long_a = [t for t in train_a if len(noleak_words_ref(t)) >= 20]
    ev += [long_a[0].upper(), "  " + long_a[1].replace(" ", " \t "), train_b[5]]  # exact
    ev += [train_b[-2].lower() + "  "]  # exact, and a short text's one gram
    ev += ["SHORT text HERE and more"]  # shares no gram with the short train text
    w = list(noleak_words_ref(long_a[2]))
    ev += ["zz yy " + " ".join(w[3:16]) + " qq"]  # one shared 13-gram
    ev += ["zz yy " + " ".join(w[3:15]) + " qq"]  # only 12 shared words: no gram
    ev += [ev[0], ev[0], "...", "ONE"]  # repeats, a text without words, a short exact copy
    return train_a, train_b, ev


def test_check_equals_noleak_check(cli, spark, tmp_path):
    train_a, train_b, ev = planted(11)
    (tmp_path / "train.txt").write_text("\n".join(t.replace("\n", " ") for t in train_a) + "\n",
                                        encoding="utf-8")
    write_jsonl(tmp_path / "more" / "b.jsonl", [{"id": i, "content": t}
                                               for i, t in enumerate(train_b)])
    (tmp_path / "eval.json").write_text(json.dumps(ev, ensure_ascii=False), encoding="utf-8")
    train = load_texts(tmp_path / "train.txt") + load_texts(tmp_path / "more" / "b.jsonl")
    evals = load_texts(tmp_path / "eval.json")
    assert evals == ev
    want = noleak.check(train, evals, methods=("exact", "ngram"))
    assert want.exact_hits >= 6 and want.ngram_hits >= 7  # the planted ones, at least

    out = tmp_path / "out"
    rc, stdout, err = cli("check", "--train", tmp_path / "train.txt", "--train",
                          tmp_path / "more", "--eval", tmp_path / "eval.json",
                          "--out-dir", out, "--json", tmp_path / "r.json", "--quiet")
    assert rc == 1, err
    report = json.loads((tmp_path / "r.json").read_text())
    for key in ("n_train", "n_eval", "exact_hits", "ngram_hits", "exact_rate", "ngram_rate"):
        assert report[key] == getattr(want, key), key
    for side in ("train", "eval"):
        theirs = getattr(want, f"fingerprint_{side}").to_dict()
        assert {k: report[f"fingerprint_{side}"][k] for k in theirs} == theirs
    assert report["contaminated"] is True and report["near_hits"] is None
    assert (f"exact {want.exact_hits}/{want.n_eval} ({want.exact_rate:.2%})  "
            f"ngram {want.ngram_hits}/{want.n_eval} ({want.ngram_rate:.2%})  status FAIL"
            ) in stdout
    assert [s["id"] for s in report["samples"]] == sorted(
        {h.eval_index for h in exact_overlap(train, evals) + ngram_overlap(train, evals)})[:16]
    assert json.loads((out / "report.json").read_text())["exact_hits"] == want.exact_hits

    # Record by record: noleak's grams (blake8 hashes) give the same shared and total counts.
    exact = {h.eval_index for h in exact_overlap(train, evals)}
    train_grams = set().union(*(_ngram_ids(t, 13) for t in train if noleak_words_ref(t)))
    rows = []
    for i, t in enumerate(evals):
        grams = _ngram_ids(t, 13) if noleak_words_ref(t) else set()
        rows.append((i, i in exact, len(grams & train_grams), len(grams), None))
    expected = spark.createDataFrame(
        rows, "id long, exact boolean, ngram_shared int, ngram_total int, near double")
    got = spark.read.parquet(str(out / "records"))
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_empty_and_wordless_texts_match_nothing(cli, tmp_path):
    """noleak counts two wordless texts as sharing a gram, and two empty texts as copies; SPEC
    section 8 does not."""
    (tmp_path / "train.txt").write_text("!!!\n\"\"\nsome words here\n", encoding="utf-8")
    (tmp_path / "eval.txt").write_text("???\n\"\"\nother words\n", encoding="utf-8")
    want = noleak.check(load_texts(tmp_path / "train.txt"), load_texts(tmp_path / "eval.txt"),
                        methods=("exact", "ngram"))
    assert (want.exact_hits, want.ngram_hits) == (1, 2)  # the quirk
    rc, out, err = cli("check", "--train", tmp_path / "train.txt", "--eval",
                       tmp_path / "eval.txt", "--json", "--quiet")
    assert rc == 0, err
    report = json.loads(out)
    assert (report["n_eval"], report["exact_hits"], report["ngram_hits"]) == (3, 0, 0)
    assert report["contaminated"] is False and "status PASS" in err


def test_objects_fields_ids_and_text_lines(cli, tmp_path):
    rnd = random.Random(3)
    texts = [" ".join(random_text(rnd, 14, 30).split()) for _ in range(40)]  # one line each
    # No field named: the first non-blank of text, content, prompt, ...; else all values.
    write_jsonl(tmp_path / "train.jsonl",
                [{"text": " ", "prompt": texts[0], "output": "x"}, {"question": texts[1]},
                 {"a": 7, "b": None, "c": "plain words"}, "a JSON string record",
                 *({"input": t} for t in texts[2:20])])
    lines = [json.dumps({"k": 1, "prompt": texts[0]}), "7 plain words",
             "\"a JSON string record\"", "not json {", texts[25], texts[19]]
    (tmp_path / "eval.txt").write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    want = noleak.check(load_texts(tmp_path / "train.jsonl"), load_texts(tmp_path / "eval.txt"),
                        methods=("exact", "ngram"))
    rc, out, err = cli("check", "--train", tmp_path / "train.jsonl", "--eval",
                       tmp_path / "eval.txt", "--json", "-", "--quiet")
    assert rc == 1, err
    report = json.loads(out)
    assert (report["n_eval"], report["exact_hits"], report["ngram_hits"]) == (
        want.n_eval, want.exact_hits, want.ngram_hits)
    assert (want.n_eval, want.exact_hits) == (6, 4)

    # A named field (any type, as str() writes it) and ids from a field.
    write_jsonl(tmp_path / "e.jsonl", [{"q": texts[5], "n": "a"}, {"q": 12, "n": "b"},
                                       {"q": texts[30], "n": "c"}])
    write_jsonl(tmp_path / "t.jsonl", [{"q": t} for t in texts[3:8]] + [{"q": "12"}])
    rc, _, err = cli("check", "--train", tmp_path / "t.jsonl", "--eval", tmp_path / "e.jsonl",
                     "--field", "q", "--id-field", "n", "--json", tmp_path / "r.json",
                     "--quiet")
    assert rc == 1, err
    report = json.loads((tmp_path / "r.json").read_text())
    assert (report["exact_hits"], report["ngram_hits"]) == (2, 2)
    assert [(s["id"], s["exact"]) for s in report["samples"]] == [("a", True), ("b", True)]


def test_near_matches_are_verified_and_cross_only(cli, spark, tmp_path):
    from leakcheck_spark.normalize import tokens

    base = [f"w{i}" for i in range(60)]
    near_copy = base[:30] + ["changed"] + base[31:]  # one token changed: J = 51/61 shingles
    far = base[:20] + [f"v{i}" for i in range(40)]
    other = [f"u{i}" for i in range(60)]
    twin = other[:59] + ["different"]
    write_jsonl(tmp_path / "train.jsonl", [{"text": " ".join(base)}, {"text": " ".join(far)},
                                           {"text": "e ".join(base)}])
    write_jsonl(tmp_path / "eval.jsonl", [{"text": " ".join(near_copy)},
                                          {"text": " ".join(other)}, {"text": " ".join(twin)},
                                          {"text": "  ".join(base)}])
    out = tmp_path / "out"
    rc, _, err = cli("check", "--train", tmp_path / "train.jsonl", "--eval",
                     tmp_path / "eval.jsonl", "--near", "--n", "40", "--out-dir", out,
                     "--format", "json", "--quiet")
    assert rc == 1, err
    report = json.loads((out / "report.json").read_text())
    assert report["near_hits"] == 2 and report["exact_hits"] == 1

    def jaccard(a: list[str], b: list[str]) -> float:
        sa, sb = set(shingles(a, 5)), set(shingles(b, 5))
        return len(sa & sb) / len(sa | sb)

    assert tokens(" ".join(near_copy)) == near_copy
    expected = spark.createDataFrame(
        [(0, False, 0, 21, jaccard(base, near_copy)), (1, False, 0, 21, None),
         (2, False, 0, 21, None), (3, True, 21, 21, 1.0)],
        "id long, exact boolean, ngram_shared int, ngram_total int, near double")
    got = spark.read.json(str(out / "records"), schema=expected.schema)
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_fingerprint_reads_files_as_noleak_does(cli, tmp_path):
    rnd = random.Random(5)
    lines = [random_text(rnd, 1, 10).replace("\n", " ") for _ in range(50)]
    lines += ["42", "\"quoted\"", "{\"prompt\": \"From an object\"}", "[1, 2]", "null", "x {"]
    # JSON padded with whitespace that str.strip() removes but JSON does not allow.
    lines += ["\u00a0{\"text\": \"padded\"}\u3000", "\u2009\"also padded\""]
    # noleak splits lines where str.splitlines does, JSON strings included: a record per piece.
    lines += ["left\u2028right", "a\x0bb\x0cc", "p\x85q\x1cr\u2029", "{\"text\": \"x\u2028y\"}",
              "lone\rcarriage"]
    (tmp_path / "a.txt").write_text("\n".join(lines) + "\n\n  \n", encoding="utf-8")
    (tmp_path / "b.json").write_text(json.dumps(lines[:30] + [{"text": "t", "id": 1}]),
                                     encoding="utf-8")
    # JSONL: a raw U+2028 inside a JSON string keeps its line whole (noleak reads two texts).
    (tmp_path / "c.jsonl").write_text('{"text": "x\u2028y"}\n', encoding="utf-8")
    rc, _, err = cli("fingerprint", "-d", f"a={tmp_path / 'a.txt'}", "-d",
                     f"b={tmp_path / 'b.json'}", "-d", f"c={tmp_path / 'c.jsonl'}",
                     "--json", tmp_path / "fp.json", "--quiet")
    assert rc == 0, err
    got = json.loads((tmp_path / "fp.json").read_text())["fingerprints"]
    assert got["c/all"]["digest"] == noleak.fingerprint(["x\u2028y"]).digest
    for name, path in (("a/all", "a.txt"), ("b/all", "b.json")):
        want = noleak.fingerprint(load_texts(tmp_path / path))
        assert (got[name]["digest"], got[name]["n_examples"], got[name]["n_unique"]) == (
            want.digest, want.n_examples, want.n_unique)


def test_library_check(spark, tmp_path):
    import leakcheck_spark as L

    (tmp_path / "train.txt").write_text("alpha beta gamma\ndelta\n", encoding="utf-8")
    (tmp_path / "eval.txt").write_text("ALPHA  beta gamma\nepsilon\n", encoding="utf-8")
    res = L.check([str(tmp_path / "train.txt")], str(tmp_path / "eval.txt"), n=2, spark=spark)
    try:
        assert (res.n_train, res.n_eval, res.exact_hits, res.ngram_hits) == (2, 2, 1, 1)
        assert res.contaminated and "status FAIL" in res.summary()
        assert res.records.orderBy("row").select("id", "exact").collect() == [(0, True), (1, False)]
    finally:
        res.unpersist()


def test_check_is_the_same_on_any_partitioning(spark, tmp_path):
    """Counts, samples and records/ (near included) do not depend on the shuffle partitions,
    on input files split into many blocks, or on AQE."""
    import leakcheck_spark as L
    from leakcheck_spark.options import Options

    train_a, train_b, ev = planted(3)
    ev += [t + " extra" for t in train_a if len(t.split()) >= 25][:12]  # near copies
    write_jsonl(tmp_path / "train" / "part-0.jsonl", [{"text": t} for t in train_a])
    write_jsonl(tmp_path / "train" / "part-1.jsonl", [{"text": t} for t in train_b])
    write_jsonl(tmp_path / "eval.jsonl", [{"id": f"e{i}", "text": t} for i, t in enumerate(ev)])
    runs = []
    for conf in ({"spark.sql.shuffle.partitions": 1},
                 {"spark.sql.shuffle.partitions": 7, "spark.sql.adaptive.enabled": "false",
                  "spark.sql.files.maxPartitionBytes": 900, "spark.sql.files.openCostInBytes": 0}):
        with spark_conf(spark, **conf):
            res = L.check([str(tmp_path / "train")],
                          L.Source("eval", str(tmp_path / "eval.jsonl"), text_field="text",
                                   id_field="id"), n=5,
                          options=Options(near=True), spark=spark)
            try:
                rep = res.to_dict()
                out = tmp_path / f"out{len(runs)}"
                res.write(str(out), "json")
            finally:
                res.unpersist()
        rep.pop("timings")
        runs.append((rep, [line for f in sorted((out / "records").glob("part-*"))
                           for line in f.read_text().splitlines()]))
    assert runs[0] == runs[1]
    assert runs[0][0]["near_hits"] >= 10 and runs[0][0]["exact_hits"] >= 5
    assert len(runs[0][1]) == len(ev)


def test_sample_previews_are_noleaks(spark, tmp_path):
    """A sample's preview is noleak's: the text split at whatever str.split() splits at (tabs and
    newlines at the ends, NBSP, U+3000, U+001C), joined by single spaces, cut at 80."""
    from noleak.report import preview

    import leakcheck_spark as L

    texts = ["\tfoo  bar\n", "x\u3000y\u00a0 z ", "\x1fq\x1cr", "w\t" * 60]
    write_jsonl(tmp_path / "e.jsonl", [{"text": t} for t in texts])
    res = L.check([str(tmp_path / "e.jsonl")], str(tmp_path / "e.jsonl"), spark=spark)
    try:
        assert [s["preview"] for s in res.samples] == [preview(t) for t in texts]
    finally:
        res.unpersist()


@pytest.mark.parametrize("args, code, words", [
    (["--n", "0"], "LC_E_USAGE", "--n 0"),
    (["--n", "x"], "LC_E_USAGE", "--n"),
    (["--field", "missing"], "LC_E_MISSING_FIELD", "'missing'"),
    (["--threshold", "2"], "LC_E_USAGE", "--threshold"),
])
def test_check_errors(cli, tmp_path, args, code, words):
    write_jsonl(tmp_path / "t.jsonl", [{"text": "a b c"}])
    write_jsonl(tmp_path / "e.jsonl", [{"text": "a b c"}])
    out = tmp_path / "out"
    rc, stdout, err = cli("check", "--train", tmp_path / "t.jsonl", "--eval",
                          tmp_path / "e.jsonl", "--out-dir", out, *args)
    assert rc == 2 and stdout == ""
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"leakcheck-spark: error [{code}]") and words in line, err
    assert not out.exists()


def test_check_bad_inputs(cli, tmp_path):
    write_jsonl(tmp_path / "t.jsonl", [{"text": "a b c"}])
    (tmp_path / "empty.txt").write_text("\n\n", encoding="utf-8")
    (tmp_path / "bad.jsonl").write_text("{\"text\": \"a\"}\n{oops\n", encoding="utf-8")
    for eval_path, code in (("empty.txt", "LC_E_EMPTY_INPUT"), ("bad.jsonl", "LC_E_BAD_FORMAT"),
                            ("nope.jsonl", "LC_E_IO")):
        rc, _, err = cli("check", "--train", tmp_path / "t.jsonl", "--eval",
                         tmp_path / eval_path, "--json", "-")
        assert rc == 2
        assert json.loads(err.strip().splitlines()[-1])["error"]["code"] == code, err
    rc, _, err = cli("check", "--eval", tmp_path / "t.jsonl")
    assert rc == 2 and "--train" in err


@pytest.mark.parametrize("n", [0, 2**31, True, 2.0])
def test_library_check_refuses_an_n_out_of_range(spark, n):
    import leakcheck_spark as L

    with pytest.raises(L.LeakcheckError, match="--n .* is not valid"):
        L.check(["unread.jsonl"], "unread.jsonl", n=n, spark=spark)
