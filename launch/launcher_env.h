// Which process of a parallel launch this is, read from the launcher's environment before (or
// without) MPI: Open MPI (OMPI_COMM_WORLD_*), PMIx (PMIX_RANK, OMPI/PMIx local rank), MPICH and
// Hydra (PMI_RANK, MPI_LOCALRANKID) and Slurm (SLURM_PROCID, SLURM_LOCALID).
//
// Used to print a configuration error every rank sees identically once (rank 0 only) and to pick
// a GPU before MPI starts. Failure: -1 when no launcher variable is set or its value is not a
// non-negative integer. Threading: reads the environment; call before threads change it.
#pragma once

namespace hoist::launch {

// This process's rank in the launched world, -1 when not launched by a known launcher.
int LauncherRank();
// This process's index among the launched processes on its node, -1 when unknown.
int LauncherLocalRank();

}  // namespace hoist::launch
