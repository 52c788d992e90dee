"""The data sets of the copy benchmarks (bench/copy.sh, bench/s3.sh), the same bytes every time:

    python3 bench/make_datasets.py WORK SMALL_FILES BIG_FILES BIG_MB DIRS

WORK/small: SMALL_FILES files of 4-64 KiB spread over DIRS directories; WORK/large: BIG_FILES
files of BIG_MB MiB each, made of 1 MiB blocks that are not all identical.
"""
import os
import random
import sys

work, small, big, big_mb, dirs = sys.argv[1], *map(int, sys.argv[2:6])
rng = random.Random(0)
for i in range(small):
    d = os.path.join(work, "small", f"d{i % dirs:02d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:05d}.bin"), "wb") as f:
        f.write(rng.randbytes(rng.randint(4, 64) * 1024))
os.makedirs(os.path.join(work, "large"), exist_ok=True)
chunk = rng.randbytes(1 << 20)
for i in range(big):
    with open(os.path.join(work, "large", f"big{i}.bin"), "wb") as f:
        for j in range(big_mb):
            f.write(chunk[j % 7:] + chunk[:j % 7])
