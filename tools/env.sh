# Sourced by hoist's scripts: lets Open MPI run as root (CI and the GPU box run as root) and
# oversubscribe small machines, and keeps it off ptrace-based single copy inside containers.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_btl=self,vader
export OMPI_MCA_plm_rsh_agent=
