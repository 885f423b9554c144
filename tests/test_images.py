"""images: dHash (imagehash), pigeonhole bands verified by popcount, groups, unreadable files."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from conftest import spark_conf, write_jsonl

pytest.importorskip("imagehash")

from leakcheck_spark.errors import LeakcheckError  # noqa: E402
from leakcheck_spark.images import (  # noqa: E402
    ImageOptions,
    hamming_distance,
    images,
    near_pairs,
    popcount,
)
from leakcheck_spark.options import Source  # noqa: E402


def picture(seed: int, size=(240, 180)):
    """A picture of its own: a background and a dozen coloured shapes placed by `seed`."""
    from PIL import Image, ImageDraw

    r = random.Random(seed)
    im = Image.new("RGB", size, tuple(r.randrange(256) for _ in range(3)))
    draw = ImageDraw.Draw(im)
    for _ in range(12):
        x, y = r.randrange(size[0]), r.randrange(size[1])
        box = [x, y, x + r.randrange(20, 120), y + r.randrange(20, 120)]
        fill = tuple(r.randrange(256) for _ in range(3))
        (draw.ellipse if r.random() < 0.5 else draw.rectangle)(box, fill=fill)
    return im


def crop2(im):
    w, h = im.size
    dx, dy = round(w * 0.01), round(h * 0.01)  # 2% of each side in all
    return im.crop((dx, dy, w - dx, h - dy))


COPIES = {  # name -> how a copy is made from its original
    "jpeg70": lambda im, p: im.save(p.with_suffix(".jpg"), quality=70),
    "half": lambda im, p: im.resize((im.width // 2, im.height // 2)).save(p),
    "double": lambda im, p: im.resize((im.width * 2, im.height * 2)).save(p),
    "crop": lambda im, p: crop2(im).save(p),
}


@pytest.fixture(scope="module")
def pictures(tmp_path_factory):
    """train/: 8 originals (PNG); test/: a copy of each of 4 originals per way of copying,
    4 pictures of their own, a truncated PNG and a text file named .png; val/: one more copy."""
    root = tmp_path_factory.mktemp("pictures")
    for split in ("train", "test", "val"):
        (root / split).mkdir()
    for i in range(8):
        picture(i).save(root / "train" / f"orig{i}.png")
    for k, (name, make) in enumerate(COPIES.items()):
        make(picture(k), root / "test" / f"{name}{k}.png")
    for i in range(4):
        picture(100 + i).save(root / "test" / f"own{i}.png")
    (root / "test" / "truncated.png").write_bytes((root / "train" / "orig7.png").read_bytes()[:400])
    (root / "test" / "text.png").write_text("not an image")
    (root / "test" / "README.md").write_text("not read: no image extension")
    COPIES["half"](picture(5), root / "val" / "half5.png")
    return root


def oracle(paths: list, threshold: int = 5) -> tuple[dict, dict]:
    """path -> imagehash hex (None when unreadable), and path -> group (smallest index in
    `paths`), by brute force and union-find."""
    import imagehash
    from PIL import Image

    hashes = {}
    for p in paths:
        try:
            with Image.open(p) as im:
                hashes[p] = str(imagehash.dhash(im))
        except Exception:  # noqa: BLE001 - unreadable
            hashes[p] = None
    parent = list(range(len(paths)))

    def root(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    for i, a in enumerate(paths):
        for j in range(i):
            b = paths[j]
            if hashes[a] and hashes[b] and hamming_distance(hashes[a], hashes[b]) <= threshold:
                parent[max(root(i), root(j))] = min(root(i), root(j))
    return hashes, {p: root(i) for i, p in enumerate(paths)}


def _sources(root):
    return [Source("pics", str(root / s), split=s) for s in ("train", "test", "val")]


def _expected_paths(root) -> list:
    """Read order: sources in order, images by path within each."""
    return [p for s in ("train", "test", "val") for p in sorted((root / s).iterdir())
            if p.suffix in (".png", ".jpg")]


def test_copies_are_found_and_hashes_groups_match_imagehash(spark, pictures):
    res = images(_sources(pictures), spark=spark)
    paths = _expected_paths(pictures)
    hashes, groups = oracle(paths)
    rows = sorted(res.images.collect(), key=lambda r: r._order)
    assert [r.id for r in rows] == [str(p) for p in paths]
    got_hex = [None if r.hash is None else f"{r.hash & (2**64 - 1):016x}" for r in rows]
    assert got_hex == [hashes[p] for p in paths]
    assert [r.group_id for r in rows] == [groups[p] for p in paths]
    # Every planted copy is in its original's group; the pictures of their own are alone.
    by_name = {p.name: r for p, r in zip(paths, rows)}
    for k, copy in enumerate(["jpeg700.jpg", "half1.png", "double2.png", "crop3.png"]):
        assert by_name[copy].group_id == by_name[f"orig{k}.png"].group_id, copy
    for i in range(4):
        assert by_name[f"own{i}.png"].group_id == by_name[f"own{i}.png"]._order
    report = res.to_dict()
    assert report["total_images"] == len(paths)
    assert report["unreadable"]["count"] == 2
    assert {u["id"].rsplit("/", 1)[1] for u in report["unreadable"]["sample"]} == {
        "truncated.png", "text.png"}
    assert all(u["reason"] for u in report["unreadable"]["sample"])
    # orig0-3 (train) with their test copies, orig5 with its val copy.
    assert report["leaked_groups"]["count"] == 5
    assert report["n_leaked_images"] == 10
    assert report["pct_leaked_by_split"] == {"test": 100.0 * 4 / 10, "train": 100.0 * 5 / 8,
                                             "val": 100.0}
    cell = report["split_matrix"]["pics/test"]["pics/train"]
    assert cell["count"] == 4
    overlaps = {(o["id"].rsplit("/", 1)[1], o["to"]): o for o in report["overlaps"]["sample"]}
    jpeg = overlaps[("jpeg700.jpg", "pics/train")]
    assert jpeg["distance"] == hamming_distance(hashes[pictures / "test" / "jpeg700.jpg"],
                                                hashes[pictures / "train" / "orig0.png"])
    assert jpeg["similarity"] == pytest.approx(1 - jpeg["distance"] / 64)
    res.unpersist()


def test_resplit_out_and_out_dir(cli, pictures, tmp_path):
    rc, out, err = cli("images", "-d", f"pics:train={pictures / 'train'}",
                       "-d", f"pics:test={pictures / 'test'}", "--out-dir", tmp_path / "rep",
                       "--format", "json", "--resplit-out", tmp_path / "resplit.jsonl",
                       "--priority", "test,train", "--quiet")
    assert rc == 0, err
    assert "leaked groups: 4" in out and "unreadable images: 2" in out
    rows = [json.loads(line) for line in (tmp_path / "resplit.jsonl").read_text().splitlines()]
    moved = {r["path"].rsplit("/", 1)[1]: r for r in rows if r["reassigned"]}
    assert set(moved) == {"orig0.png", "orig1.png", "orig2.png", "orig3.png"}
    assert {r["split"] for r in moved.values()} == {"test"}
    assert list(rows[0]) == ["path", "split", "original_split", "group_id", "reassigned"]
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert report["command"] == "images" and report["options"]["threshold"] == 5
    unreadable = [json.loads(line) for f in (tmp_path / "rep" / "unreadable").glob("part-*")
                  for line in f.read_text().splitlines()]
    assert len(unreadable) == 2
    leaked = [json.loads(line) for f in (tmp_path / "rep" / "leaked_groups").glob("part-*")
              for line in f.read_text().splitlines()]
    assert sorted(g["members"] for g in leaked) == [2, 2, 2, 2]
    # hashes/: every image in read order with imagehash's hex (null when unreadable).
    paths = [p for p in _expected_paths(pictures) if p.parent.name != "val"]
    want, groups = oracle(paths)
    listed = [json.loads(line) for f in sorted((tmp_path / "rep" / "hashes").glob("part-*"))
              for line in f.read_text().splitlines()]
    assert [(h["split"], h["id"], h.get("hash"), h["group_id"]) for h in listed] == [
        (p.parent.name, str(p), want[p], groups[p]) for p in paths]


def test_the_same_report_and_groups_on_any_partitioning(spark, pictures):
    results = []
    for shuffle in (1, 8):
        with spark_conf(spark, **{"spark.sql.shuffle.partitions": shuffle}):
            res = images(_sources(pictures), spark=spark)
            report = res.to_dict()
            report.pop("timings")
            results.append((report, sorted((r.id, r.group_id) for r in res.images.collect())))
            res.unpersist()
    assert results[0] == results[1]


def test_an_id_repeated_across_splits_gets_the_same_order_and_group_on_any_partitioning(
        spark, pictures, tmp_path):
    # A table may list one path (the id) in several splits, readable or not: such rows tie on
    # everything but their split, and their read order (`_order`, hence an unreadable image's
    # group id and the --resplit-out row order) must not follow the partitioning.
    files = [str(p) for p in sorted((pictures / "train").glob("*.png"))[:3]]
    files.append(str(tmp_path / "missing.png"))
    rnd = random.Random(3)
    write_jsonl(tmp_path / "t.jsonl", [{"file": rnd.choice(files), "s": s, "pad": "x" * i}
                                       for i in range(40) for s in ("val", "train", "test")])
    results = []
    for conf in ({"spark.sql.shuffle.partitions": 1},
                 {"spark.sql.shuffle.partitions": 7, "spark.sql.adaptive.enabled": "false",
                  "spark.sql.files.maxPartitionBytes": 600,
                  "spark.sql.files.openCostInBytes": 0}):
        with spark_conf(spark, **conf):
            res = images([Source("t", str(tmp_path / "t.jsonl"), split_field="s")],
                         ImageOptions(path_field="file"), spark=spark)
            report = res.to_dict()
            report.pop("timings")
            results.append((sorted((r._order, r.split, r.id, r.group_id)
                                   for r in res.images.collect()), report))
            res.unpersist()
    assert results[0] == results[1]
    # Tied rows come in split order, so each unreadable row's group is itself, in that order.
    missing = [(split, order) for order, split, path, _ in results[0][0] if path == files[-1]]
    assert [s for s, _ in missing] == sorted(s for s, _ in missing)


def test_tables_with_paths_or_bytes_and_path_lists(spark, pictures, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    train = sorted((pictures / "train").glob("*.png"))
    pq.write_table(pa.table({"name": [p.name for p in train],
                             "img": [p.read_bytes() for p in train]}), tmp_path / "train.parquet")
    test = sorted((pictures / "test").glob("*.png"))[:6]
    write_jsonl(tmp_path / "test.jsonl", [{"file": str(p), "s": "test"} for p in test]
                + [{"file": str(tmp_path / "missing.png"), "s": "test"}])
    (tmp_path / "list").mkdir()
    (tmp_path / "list" / "val.txt").write_text(
        f"{pictures / 'val' / 'half5.png'}\n\n../missing-too.png\n")
    sources = [Source("a", str(tmp_path / "train.parquet"), split="train", id_field="name"),
               Source("b", str(tmp_path / "test.jsonl"), split_field="s"),
               Source("c", str(tmp_path / "list" / "val.txt"), split="val")]
    by_bytes = images(sources[:1], ImageOptions(bytes_field="img"), spark=spark)
    assert sorted(r.id for r in by_bytes.images.collect()) == [p.name for p in train]
    by_bytes.unpersist()
    res = images(sources[1:], ImageOptions(path_field="file"), spark=spark)
    report = res.to_dict()
    assert report["total_images"] == 9 and report["unreadable"]["count"] == 2
    reasons = {u["id"].rsplit("/", 1)[1]: u["reason"] for u in report["unreadable"]["sample"]}
    assert reasons["missing.png"].startswith("FileNotFoundError")
    assert reasons["missing-too.png"].startswith("FileNotFoundError")
    assert set(report["groups"]) == {"b/test", "c/val"}
    res.unpersist()


def test_a_path_field_and_a_bytes_field_together_are_a_usage_error(tmp_path, capsys):
    # The path was the id of an image hashed from the bytes, read itself only where they were null.
    from leakcheck_spark.cli import main

    assert main(["images", "-d", f"t={tmp_path / 't.parquet'}", "--path-field", "p",
                 "--bytes-field", "b"]) == 2
    assert capsys.readouterr().err == (
        "leakcheck-spark: error [LC_E_USAGE]: --path-field 'p' and --bytes-field 'b' both name "
        "the image: give one (hint: to name images read from bytes by the path column, write "
        "--bytes-field b --id-field p)\n")


@pytest.mark.parametrize("args, flag", [
    (["-d", "x=imgs", "--path-field", "p"], "--path-field 'p'"),
    (["-d", "x=imgs/*.png", "--bytes-field", "b"], "--bytes-field 'b'"),
    (["-d", "x:train=imgs", "-d", "x:test=list.txt", "--id-field", "i"], "--id-field 'i'"),
    (["-d", "x=list.txt", "--split-field", "s"], "--split-field 's'"),
    # -o sets a field on one dataset's sources: the table y does not read x's
    (["-d", "x=imgs", "-d", "y=t.parquet", "--path-field", "p", "-o", "x.id=i"], "-o x.id=i"),
])
def test_a_table_field_no_table_reads_is_a_usage_error(tmp_path, capsys, args, flag):
    # These flags name a table's columns; images of a directory or list have none, and the flag
    # was ignored without a word.
    from leakcheck_spark.cli import main

    assert main(["images", *args, "--out-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"leakcheck-spark: error [LC_E_USAGE]: {flag} names a table's column, "
                          "and no source it applies to is a table"), err
    assert not (tmp_path / "out").exists()


def test_a_table_field_is_for_the_tables_among_the_sources(spark, tmp_path, pictures):
    # --id-field given once applies to every source; only the table reads it.
    write_jsonl(tmp_path / "t.jsonl", [{"file": str(pictures / "train" / "orig0.png"),
                                        "key": "k1"}])
    got = images([Source("d", str(pictures / "train"), split="train", id_field="key"),
                  Source("t", str(tmp_path / "t.jsonl"), split="test", id_field="key")],
                 ImageOptions(path_field="file"), spark=spark)
    rows = got.images.select("dataset", "id").collect()
    assert sorted(r.id for r in rows if r.dataset == "t") == ["k1"]
    assert len([r for r in rows if r.dataset == "d"]) == 8


def test_a_split_value_that_cannot_name_a_group_is_a_bad_value(spark, tmp_path):
    # As for text sources: a split column's "a/b" made the group "t/a/b".
    write_jsonl(tmp_path / "t.jsonl", [{"file": "x.png", "s": "train"},
                                       {"file": "y.png", "s": "a/b"}])
    with pytest.raises(LeakcheckError) as info:
        images([Source("t", str(tmp_path / "t.jsonl"), split_field="s")],
               ImageOptions(path_field="file"), spark=spark)
    assert info.value.code == "LC_E_BAD_VALUE" and info.value.message == (
        f"split field 's' of t={tmp_path / 't.jsonl'} holds 'a/b', not a valid split")


def test_pigeonhole_bands_find_every_pair_within_the_threshold(spark):
    rnd = np.random.default_rng(7)
    base = rnd.integers(0, 2**64, size=300, dtype=np.uint64)
    planted = []
    for b in base[:150]:  # neighbours at distances 1..8
        mask = np.uint64(0)
        for bit in rnd.choice(64, size=int(rnd.integers(1, 9)), replace=False):
            mask |= np.uint64(1) << np.uint64(bit)
        planted.append(b ^ mask)
    keys = np.unique(np.concatenate([base, np.array(planted, dtype=np.uint64)])).view(np.int64)
    for t in (0, 3, 5, 8):
        df = spark.createDataFrame([(int(k),) for k in keys], "key long")
        got = {(r.key, r.other, r.distance) for r in near_pairs(df, t).collect()}
        d = popcount(keys[:, None] ^ keys[None, :])
        i, j = np.nonzero((d <= t) & (keys[:, None] < keys[None, :]))
        want = {(int(keys[a]), int(keys[b]), int(d[a, b])) for a, b in zip(i, j)}
        assert got == want and (t == 0 or want)


def test_hamming_distance_forms():
    assert hamming_distance("0000000000000000", "ffffffffffffffff") == 64
    assert hamming_distance(-1, 0) == 64
    assert list(hamming_distance(np.array([1, 3]), np.array([0, 0]))) == [1, 2]
    assert hamming_distance(2**64 - 1, np.int64(0)) == 64
    for bad in ("xyz", "1" * 17, "", 2**64, -2**63 - 1, 1.5, None):
        with pytest.raises(LeakcheckError, match="not a 64-bit hash") as err:
            hamming_distance(bad, 0)
        assert err.value.code == "LC_E_USAGE"


@pytest.mark.parametrize(("args", "code", "hint"), [
    (["--threshold", "64"], "LC_E_USAGE", "fix --threshold"),
    (["--threshold", "-1"], "LC_E_USAGE", "fix --threshold"),
    (["--priority", "a,a"], "LC_E_USAGE", ""),
    # images read no text or label: such an override would be ignored
    (["-o", "p.label=y"], "LC_E_BAD_SPEC", ""),
    (["-o", "p.text=y"], "LC_E_BAD_SPEC", ""),
])
def test_bad_flags(cli, pictures, args, code, hint):
    rc, _, err = cli("images", "-d", f"p={pictures / 'train'}", *args)
    assert rc == 2 and err.startswith(f"leakcheck-spark: error [{code}]")
    assert f"(hint: {hint}" in err, err


def test_bad_sources_are_one_line(cli, tmp_path):
    write_jsonl(tmp_path / "t.jsonl", [{"file": "x.png"}])
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "a.txt.bak").write_text("x")
    (tmp_path / "h.csv").write_text("file\n")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "r.csv").write_text("file,File\nx.png,y.png\n")
    repeat = f"the header of {tmp_path / 'm' / 'r.csv'} repeats the column 'file' (file, File)"
    for args, code, hint in (
        # Named as the file's problem, whether the table is given as a file or as a pattern.
        (["-d", f"r={tmp_path / 'm' / 'r.csv'}", "--path-field", "file"], "LC_E_BAD_FORMAT",
         repeat),
        (["-d", f"r={tmp_path / 'm' / '*.csv'}", "--path-field", "file"], "LC_E_BAD_FORMAT",
         repeat),
        (["-d", f"t={tmp_path / 't.jsonl'}"], "LC_E_MISSING_FIELD", ""),  # a table needs a column
        (["-d", f"t={tmp_path / 't.jsonl'}", "--path-field", "nope"], "LC_E_MISSING_FIELD", ""),
        (["-d", f"e={tmp_path / 'empty'}"], "LC_E_EMPTY_INPUT", "files with an image extension"),
        (["-d", f"h={tmp_path / 'h.csv'}", "--path-field", "file"], "LC_E_EMPTY_INPUT",
         "a table contributes one image per row"),
        (["-d", f"n={tmp_path / 'nope'}"], "LC_E_IO", ""),
    ):
        rc, _, err = cli("images", *args, "--quiet")
        assert rc == 2 and len(err.strip().splitlines()) == 1, err
        assert err.startswith(f"leakcheck-spark: error [{code}]") and hint in err, err


def test_without_imagehash_the_error_names_the_extra(cli, monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "imagehash", None)
    rc, _, err = cli("images", "-d", f"p={tmp_path}", "--quiet")
    assert rc == 2 and err.startswith("leakcheck-spark: error [LC_E_USAGE]: images needs the "
                                      "optional 'imagehash' package")
    assert "leakcheck-spark[images]" in err


def test_relative_sources_give_relative_paths(cli, pictures, tmp_path, monkeypatch):
    monkeypatch.chdir(pictures)
    rc, _, err = cli("images", "-d", "p:train=train", "-d", "p:val=val", "--quiet",
                     "--resplit-out", tmp_path / "r.csv")
    assert rc == 0, err
    rows = (tmp_path / "r.csv").read_text().splitlines()
    assert rows[1].startswith("train/orig0.png,train,train,0,")
    assert rows[-1] == "val/half5.png,train,val,5,true"
    monkeypatch.chdir(pictures / "val")  # a source outside the working directory
    rc, _, err = cli("images", "-d", "p:train=../train/orig5.png", "-d", "p:val=../val",
                     "-d", "p:test=../t*/h*.png", "--quiet", "--resplit-out", tmp_path / "s.csv")
    assert rc == 0, err
    assert [r.split(",")[0] for r in (tmp_path / "s.csv").read_text().splitlines()[1:]] == [
        "../train/orig5.png", "half5.png", "../test/half1.png"]


def test_base64_text_that_is_not_base64_is_one_unreadable_image(spark, pictures, tmp_path):
    import base64

    png = (pictures / "train" / "orig0.png").read_bytes()
    good = base64.b64encode(png).decode()
    (tmp_path / "t.csv").write_text(f"name,img\na,{good}\nb,{good}\nc,test/broken.png\n")
    res = images([Source("t", str(tmp_path / "t.csv"), split="test", id_field="name")],
                 ImageOptions(bytes_field="img"), spark=spark)
    report = res.to_dict()
    res.unpersist()
    assert (report["total_images"], report["unreadable"]["count"]) == (3, 1)
    assert report["unreadable"]["sample"][0]["id"] == "c"
    assert "not base64" in report["unreadable"]["sample"][0]["reason"]


def test_a_binary_path_field_is_a_bad_value(cli, pictures, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    png = (pictures / "train" / "orig0.png").read_bytes()
    pq.write_table(pa.table({"img": [png]}), tmp_path / "t.parquet")
    rc, _, err = cli("images", "-d", f"t={tmp_path / 't.parquet'}", "--path-field", "img",
                     "--quiet")
    assert rc == 2 and err.startswith("leakcheck-spark: error [LC_E_BAD_VALUE]: --path-field"), err


def test_a_csv_table_is_read_as_text_sources_are(cli, pictures, tmp_path):
    # A BOM before the header, a quoted path with a doubled quote; then a second file of the
    # glob whose columns come in another order: an error naming it, not names read as paths.
    odd = tmp_path / 'say "hi".png'
    odd.write_bytes((pictures / "train" / "orig0.png").read_bytes())
    (tmp_path / "a.csv").write_text(f'\ufeffname,img\na,"{str(odd).replace(chr(34), 2 * chr(34))}"\n',
                                    encoding="utf-8")
    rc, out, err = cli("images", "-d", f"t:test={tmp_path / 'a.csv'}", "--path-field", "img",
                       "--id-field", "name", "--json", "-", "--quiet")
    assert rc == 0, err
    assert (json.loads(out)["total_images"], json.loads(out)["unreadable"]["count"]) == (1, 0)
    (tmp_path / "b.csv").write_text(f"img,name\n{odd.with_name('x.png')},b\n", encoding="utf-8")
    rc, _, err = cli("images", "-d", f"t:test={tmp_path / '*.csv'}", "--path-field", "img",
                     "--id-field", "name", "--quiet")
    assert rc == 2 and err.startswith("leakcheck-spark: error [LC_E_BAD_FORMAT]"), err
    assert "b.csv" in err
    # pandas' to_csv names the index column "": read through a pattern as through a file (the
    # pattern's files' header, not the pattern, gives Spark the name).
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "p.csv").write_text(f",img\n0,{odd}\n1,{odd.with_name('x.png')}\n")
    for path in ("m/p.csv", "m/*.csv"):
        rc, out, err = cli("images", "-d", f"t:test={tmp_path / path}", "--path-field", "img",
                           "--json", "-", "--quiet")
        assert rc == 0, err
        assert (json.loads(out)["total_images"], json.loads(out)["unreadable"]["count"]) == (2, 1)


def test_invalid_utf8_in_a_csv_table_is_bad_format_naming_the_line(cli, pictures, tmp_path):
    # As for a CSV source: the reader put U+FFFD in place of the byte, silently (a path that
    # names no file, an unreadable image; or an altered id).  A genuine U+FFFD is an id.
    image = pictures / "train" / "orig0.png"
    (tmp_path / "a.csv").write_bytes(f"name,img\n\ufffd,{image}\n".encode())
    rc, out, err = cli("images", "-d", f"t:test={tmp_path / 'a.csv'}", "--path-field", "img",
                       "--id-field", "name", "--json", "-", "--quiet")
    assert rc == 0, err
    assert (json.loads(out)["total_images"], json.loads(out)["unreadable"]["count"]) == (1, 0)
    (tmp_path / "a.csv").write_bytes(f"name,img\n\ufffd,{image}\nb,".encode()
                                     + str(image.parent).encode() + b"/x\xe9.png\n")
    rc, _, err = cli("images", "-d", f"t:test={tmp_path / 'a.csv'}", "--path-field", "img",
                     "--id-field", "name", "--quiet")
    assert (rc, err) == (2, "leakcheck-spark: error [LC_E_BAD_FORMAT]: invalid UTF-8 in line 3 "
                         f"of {tmp_path / 'a.csv'} (invalid continuation byte at byte "
                         f"{len(str(image.parent)) + 5} of the line) (hint: CSV files are read "
                         "as UTF-8: convert the file (e.g. iconv -f ITS-ENCODING -t UTF-8) or "
                         "fix the line)\n"), err


def test_a_csv_table_row_with_a_value_missing_is_bad_format_quoting_it(cli, pictures, tmp_path):
    # Spark's own message quoted the row as "Malformed CSV record: b", which reads like a row
    # number; the row is said to be a row, with what to do about it.
    image = pictures / "train" / "orig0.png"
    (tmp_path / "a.csv").write_text(f"name,img\na,{image}\nb\n")
    rc, _, err = cli("images", "-d", f"t:test={tmp_path / 'a.csv'}", "--path-field", "img",
                     "--id-field", "name", "--quiet")
    assert (rc, err) == (2, "leakcheck-spark: error [LC_E_BAD_FORMAT]: cannot read "
                         f"{tmp_path / 'a.csv'}: a row has more or fewer values than the "
                         "header: 'b' (hint: every row has a value for each column of the "
                         'header: quote a value that holds a comma or a line break ("a,b"), '
                         "doubling each quote in it)\n"), err


def test_a_zero_byte_image_is_counted_and_listed_as_unreadable(spark, pictures, tmp_path):
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "a.png").write_bytes((pictures / "train" / "orig0.png").read_bytes())
    # Names a URI spells otherwise (space, %): the listing and the scan must agree on them.
    (tmp_path / "imgs" / "my cat 100%.png").write_bytes(
        (pictures / "train" / "orig1.png").read_bytes())
    (tmp_path / "imgs" / "empty dog.png").write_bytes(b"")
    res = images([Source("p", str(tmp_path / "imgs"), split="test")], spark=spark)
    report = res.to_dict()
    res.unpersist()
    assert (report["total_images"], report["unreadable"]["count"]) == (3, 1)
    [entry] = report["unreadable"]["sample"]
    assert entry["id"] == str(tmp_path / "imgs" / "empty dog.png")
    assert "cannot identify image file" in entry["reason"]


def test_an_image_the_user_may_not_read_is_unreadable_and_the_run_goes_on(
        pictures, tmp_path, unprivileged):
    # SPEC 7: an unreadable image never stops the run.  Before: the scan opened every file of
    # the directory, images or not, and the first it could not was LC_E_IO for the whole run.
    import subprocess
    import sys

    imgs = tmp_path / "imgs"
    imgs.mkdir()
    for name in ("a.png", "B.PNG"):
        (imgs / name).write_bytes((pictures / "train" / "orig0.png").read_bytes())
    (imgs / "notes.md").write_text("not an image\n")
    for name in ("B.PNG", "notes.md"):
        (imgs / name).chmod(0o000)
    try:
        proc = subprocess.run([*unprivileged, sys.executable, "-m", "leakcheck_spark", "images",
                               "-d", f"p:test={imgs}", "--out-dir", tmp_path / "out", "--quiet"],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
    finally:
        for name in ("B.PNG", "notes.md"):
            (imgs / name).chmod(0o644)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert (report["total_images"], report["unreadable"]["count"]) == (2, 1)
    [entry] = report["unreadable"]["sample"]
    assert entry["id"] == str(imgs / "B.PNG") and "Permission denied" in entry["reason"]


def test_an_hf_source_is_a_usage_error_not_a_spark_failure(cli):
    rc, _, err = cli("images", "-d", "p=hf:org/name", "--quiet")
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("leakcheck-spark: error [LC_E_USAGE]: images does not read Hugging "
                          "Face datasets (p=hf:org/name)"), err


def test_an_output_inside_a_catalog_tables_files_is_a_usage_error(spark, cli, pictures):
    from leakcheck_spark.paths import local_path

    spark.createDataFrame([(str(pictures / "train" / "orig0.png"), "x")], "img string, t string"
                          ).write.mode("overwrite").saveAsTable("lc_images_table")
    where = f"{local_path(spark.conf.get('spark.sql.warehouse.dir'))}/lc_images_table"
    # The table's directory holds part files and _SUCCESS, as a directory of rows of ours does:
    # only the table check refuses it as --resplit-out.
    for args in (["images", "-d", "p:train=table:lc_images_table", "--path-field", "img",
                  "--resplit-out", where],
                 ["audit", "-d", "p:train=table:lc_images_table", "--text-field", "t",
                  "--out-dir", f"{where}/report"]):
        rc, _, err = cli(*args, "--quiet")
        assert rc == 2 and len(err.strip().splitlines()) == 1, err
        assert err.startswith(f"leakcheck-spark: error [LC_E_USAGE]: {args[-2]} {args[-1]} "), err
        assert "the input table:lc_images_table" in err, err
    assert spark.table("lc_images_table").count() == 1  # the table's files are still there


def test_a_parquet_table_with_columns_differing_only_in_case(cli, tmp_path):
    # As for the text commands: a one-line BAD_FORMAT naming the setting that reads such a file
    # (was "unexpected failure ... this looks like a bug").
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"img": [str(tmp_path / "a.png")], "IMG": ["b"]}),
                   tmp_path / "t.parquet")
    rc, _, err = cli("images", "-d", f"p={tmp_path / 't.parquet'}", "--path-field", "img",
                     "--quiet")
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("leakcheck-spark: error [LC_E_BAD_FORMAT]: the columns of "
                          f"{tmp_path / 't.parquet'} include two named "), err
    assert "--conf spark.sql.caseSensitive=true" in err, err


def test_a_parquet_directory_whose_parts_differ_in_columns(cli, pictures, tmp_path):
    # Its columns are the union of its parts' (as for the text commands): the split column only
    # the second part has was "not in" the table, read with the first part's columns.
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "t.parquet").mkdir()
    pq.write_table(pa.table({"p": [str(pictures / "train" / "orig0.png")]}),
                   tmp_path / "t.parquet" / "part-0.parquet")
    pq.write_table(pa.table({"p": [str(pictures / "train" / "orig1.png")], "s": ["test"]}),
                   tmp_path / "t.parquet" / "part-1.parquet")
    rc, out, err = cli("images", "-d", f"x={tmp_path / 't.parquet'}", "--path-field", "p",
                       "--split-field", "s", "--quiet", "--json", "-")
    assert rc == 0, err
    assert sorted(json.loads(out)["groups"]) == ["x/all", "x/test"]
