"""One of mpi4py's ports of the OSU micro-benchmarks (demo/osu_<NAME>.py in mpi4py's sources),
with shorter loops than their defaults: rank 0 prints '<size> <value>' lines (latency in us,
bandwidth in MB/s). Run under an MPI launcher: python3 mpi_osu.py DEMO_DIR NAME MAX_SIZE."""
import sys

demo, name, max_size = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, demo)
bench = getattr(__import__("osu_" + name), "osu_" + name)
if name in ("bw", "bibw"):
    bench(skip=5, loop=50, skip_large=2, loop_large=10, MAX_MSG_SIZE=max_size)
else:
    bench(skip=200, loop=2000, skip_large=10, loop_large=100, MAX_MSG_SIZE=max_size)
