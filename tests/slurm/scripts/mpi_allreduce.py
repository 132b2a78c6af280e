"""mpi4py proof: allreduce of rank+1 over all ranks; rank 0 writes JSON to argv[1]."""

import json
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1)
hosts = comm.gather(MPI.Get_processor_name())
if comm.Get_rank() == 0:
    json.dump({"size": comm.Get_size(), "sum": total}, open(sys.argv[1], "w"))
