"""Every rank adds its number with MPI_Allreduce; rank 0 checks the sum."""

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
total = comm.allreduce(rank, op=MPI.SUM)
print(f"rank {rank}/{size} on {MPI.Get_processor_name()}: sum {total}", flush=True)
if rank == 0 and total != size * (size - 1) // 2:
    raise SystemExit(f"wrong sum {total}")
