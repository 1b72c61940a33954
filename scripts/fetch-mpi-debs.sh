#!/usr/bin/env bash
# Downloads Open MPI's Debian packages (the runtime, not the compiler
# wrappers) into DIR, for a machine that cannot download, such as the GPU
# machines bench/multi_gpu.sh runs on: carry DIR there and give it as
# MPI_DEBS=DIR, which unpacks them under /tmp (never over /) and runs from
# there. Needs apt's package lists (apt-get update) on this machine.
#   scripts/fetch-mpi-debs.sh DIR
set -eu
dir=${1:?usage: scripts/fetch-mpi-debs.sh DIR}
# Open MPI and the libraries it loads that a machine without it may lack;
# the C library and the like are the machine's own.
pkgs=(openmpi-bin openmpi-common libopenmpi3 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libpmix2
    libfabric1 libucx0 libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200 libnuma1 libpsm2-2 libpsm-infinipath1
    libmunge2 libpciaccess0 libxnvctrl0 libudev1)
mkdir -p "$dir"
cd "$dir"
apt-get download "${pkgs[@]}"
echo "fetch-mpi-debs: ${#pkgs[@]} packages in $dir"
