"""Benchmark: `images` on real images with planted copies, beside a single-process imagehash loop.

Builds the image set itself (once, into CORPUS): the PNG and JPEG files shipped by the machine's
Debian packages (icon themes, pixmaps, desktop backgrounds: ``/usr/share`` by default), at least
32x32 pixels and distinct by content, are the originals in ``train/``; each gets planted copies,
made the ways images get copied between datasets (JPEG at qualities 95 to 45, resized to 50% to
200%, a 2% crop, the crop as a JPEG, a PNG re-encode: :data:`VARIANTS`, each at most once per
original), spread over ``val/`` and ``test/`` until the set holds ``--images`` files (default
50,000).

Then, in one run on the same files:

* ``leakcheck-spark images`` (local mode, all cores) in a subprocess, as a user runs it: wall
  time, images/s, peak memory (PSS of driver + JVM + Python workers);
* the single-machine peer: one Python process hashing every file with ``imagehash.dhash`` (what
  the leakaudit reference does image by image), wall time and images/s;
* recall of the planted copies: a copy counts as found when it is in its original's group;
* exactness: the pairs within the threshold found by brute force over the peer's hashes (all
  pairs, numpy popcount) against the pairs in our groups.

    python benchmarks/images_audit.py /tmp/images-corpus [--images 50000] [--source /usr/share]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import run

# How copies are made: JPEG re-encodes at a quality, resizes by a factor, a 2% crop (1% off each
# side), the crop as a JPEG, a PNG re-encode.
VARIANTS = (*[f"jpeg{q}" for q in (95, 85, 75, 65, 55, 45)],
            *[f"resize{f}" for f in (50, 60, 70, 80, 90, 110, 125, 150, 175, 200)],
            "crop", "crop_jpeg", "png")


def make_variant(im, name: str, path: Path) -> Path:
    """Write `im` copied the way `name` says; returns the file written."""
    w, h = im.size
    rgb = im.convert("RGB")
    if name.startswith("jpeg"):
        out = path.with_suffix(".jpg")
        rgb.save(out, quality=int(name[4:]))
    elif name.startswith("resize"):
        f = int(name[6:]) / 100
        out = path.with_suffix(".png")
        im.resize((max(1, round(w * f)), max(1, round(h * f)))).save(out)
    elif name in ("crop", "crop_jpeg"):
        dx, dy = max(1, round(w * 0.01)), max(1, round(h * 0.01))
        c = (rgb if name == "crop_jpeg" else im).crop((dx, dy, w - dx, h - dy))
        out = path.with_suffix(".jpg" if name == "crop_jpeg" else ".png")
        c.save(out, **({"quality": 85} if name == "crop_jpeg" else {}))
    else:
        out = path.with_suffix(".png")
        im.save(out, optimize=True)
    return out


def build(corpus: Path, source: Path, total: int) -> list[tuple[str, str]]:
    """Write the image set; returns the planted (original, copy) pairs (also in planted.csv)."""
    from PIL import Image

    planted_csv = corpus / "planted.csv"
    if planted_csv.exists():
        with open(planted_csv) as fh:
            return [tuple(r) for r in csv.reader(fh)]
    seen, originals = set(), []
    for p in sorted(source.rglob("*")):
        if p.suffix.lower() not in (".png", ".jpg", ".jpeg") or not p.is_file():
            continue
        try:
            data = p.read_bytes()
            digest = hashlib.sha1(data).hexdigest()
            if digest in seen:
                continue
            with Image.open(p) as im:
                if min(im.size) < 32:
                    continue
                im.load()
            seen.add(digest)
            originals.append(p)
        except Exception:  # noqa: BLE001 - not a readable image: not an original
            continue
    for d in ("train", "val", "test"):
        (corpus / d).mkdir(parents=True, exist_ok=True)
    per = min(len(VARIANTS), max(1, -(-(total - len(originals)) // len(originals))))
    planted, written = [], len(originals)
    for i, p in enumerate(originals):
        with Image.open(p) as im:
            im.load()
            orig = corpus / "train" / f"o{i:05d}.png"
            im.save(orig)
            for k in range(per):
                if written >= total:
                    break
                name = VARIANTS[(i + k) % len(VARIANTS)]
                split = "val" if k % 3 == 2 else "test"
                copy = make_variant(im, name, corpus / split / f"o{i:05d}-{name}")
                planted.append((str(orig), str(copy)))
                written += 1
    with open(planted_csv, "w", newline="") as fh:
        csv.writer(fh).writerows(planted)
    return planted


def peer(files: list[Path]) -> tuple[float, dict[str, str | None]]:
    """Hash every file with imagehash in this one process; (seconds, path -> hex or None)."""
    import imagehash
    from PIL import Image

    start = time.monotonic()
    hashes: dict[str, str | None] = {}
    for p in files:
        try:
            with Image.open(p) as im:
                hashes[str(p)] = str(imagehash.dhash(im))
        except Exception:  # noqa: BLE001
            hashes[str(p)] = None
    return time.monotonic() - start, hashes


def brute_check(hashes: dict[str, str | None], group: dict[str, str], threshold: int
                ) -> tuple[int, int]:
    """All pairs of files within `threshold` by comparing every pair (numpy, in blocks):
    (how many there are, how many of them are not in one of our groups)."""
    paths = sorted(p for p, h in hashes.items() if h)
    vals = np.array([int(hashes[p], 16) for p in paths], dtype=np.uint64)
    gid = np.array([int(group[p]) for p in paths], dtype=np.int64)
    total = missed = 0
    step = 1024
    for lo in range(0, len(vals), step):
        hi = min(lo + step, len(vals))
        close = np.bitwise_count(vals[lo:hi, None] ^ vals[None, :]) <= threshold
        close &= np.arange(lo, hi)[:, None] < np.arange(len(vals))[None, :]  # each pair once
        total += int(close.sum())
        missed += int((close & (gid[lo:hi, None] != gid[None, :])).sum())
    return total, missed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--images", type=int, default=50_000)
    ap.add_argument("--source", type=Path, default=Path("/usr/share"))
    ap.add_argument("--threshold", type=int, default=5)
    ap.add_argument("--master", default="local[*]")
    args = ap.parse_args()

    t = time.monotonic()
    planted = build(args.corpus, args.source, args.images)
    files = sorted(f for d in ("train", "val", "test") for f in (args.corpus / d).iterdir())
    print(f"image set: {len(files):,} files ({sum(f.stat().st_size for f in files) / 1e6:,.0f} "
          f"MB), {len(planted):,} planted copies (built or found in {time.monotonic() - t:.0f} s)")

    work = Path(tempfile.mkdtemp(prefix="lc-img-bench-"))
    cmd = [sys.executable, "-m", "leakcheck_spark", "images", "--master", args.master,
           *[a for d in ("train", "val", "test") for a in ("-d", f"icons:{d}={args.corpus / d}")],
           "--threshold", str(args.threshold), "--out-dir", str(work / "report"),
           "--resplit-out", str(work / "resplit.csv")]
    wall, peak, *_ = run(cmd)
    report = json.loads((work / "report" / "report.json").read_text())
    n = report["total_images"]
    print("command:", " ".join(cmd))
    print(f"leakcheck-spark images: {n:,} images, wall {wall:,.1f} s ({n / wall:,.0f} images/s), "
          f"peak memory (PSS of driver + JVM + workers) {peak / 2**30:,.2f} GiB")
    print("stage timings (s):", json.dumps(report["timings"]))
    print(f"leaked groups {report['leaked_groups']['count']:,}, leaked images "
          f"{report['n_leaked_images']:,}, unreadable {report['unreadable']['count']:,}")

    peer_wall, hashes = peer(files)
    print(f"single-process imagehash loop (hashes only, no grouping): {peer_wall:,.1f} s "
          f"({len(files) / peer_wall:,.0f} images/s)")

    with open(work / "resplit.csv") as fh:
        group = {r["path"]: r["group_id"] for r in csv.DictReader(fh)}
    found = sum(group.get(o) is not None and group.get(o) == group.get(c) for o, c in planted)
    print(f"recall of planted copies (in their original's group): {found:,}/{len(planted):,} "
          f"= {found / len(planted):.4f}")
    by_variant: dict[str, list[int]] = {}
    for o, c in planted:
        v = Path(c).stem.split("-", 1)[1]
        hit = by_variant.setdefault(v, [0, 0])
        hit[0] += group.get(o) == group.get(c)
        hit[1] += 1
    print("  by copy:", ", ".join(f"{v} {a / b:.3f}" for v, (a, b) in sorted(by_variant.items())))
    total, missed = brute_check(hashes, group, args.threshold)
    print(f"exactness: {total:,} pairs within distance {args.threshold} by brute force over "
          f"imagehash's hashes; {missed:,} of them not in one of our groups")
    sizes: dict[str, int] = {}
    for g in group.values():
        sizes[g] = sizes.get(g, 0) + 1
    distinct = len({h for h in hashes.values() if h})
    print(f"groups: {len(sizes):,}, the largest {max(sizes.values()):,} images; "
          f"{distinct:,} distinct hashes")
    print(f"unreadable: ours {report['unreadable']['count']:,}, the peer's "
          f"{sum(h is None for h in hashes.values()):,}")
    if not os.environ.get("KEEP"):
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
