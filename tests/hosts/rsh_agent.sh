#!/usr/bin/env bash
# Open MPI's rsh agent for the namespace test bed (tests/hosts/bed.sh): `rsh_agent.sh HOST CMD...`
# runs CMD, as ssh would run it on HOST, inside HOST's network namespace (HOST is the namespace's
# name) and a fresh UTS namespace whose hostname is HOST. Like ssh, it joins CMD's words into one
# command line for a shell (Open MPI sends its daemon's environment set-up that way). The
# filesystem is shared, as on a cluster with a shared checkpoint folder. Nothing ties the remote
# daemon to mpirun but its TCP connection, as with ssh and a host that is cut off.
set -euo pipefail
host="$1"
shift
exec ip netns exec "$host" unshare --uts -- /bin/sh -c 'hostname "$1" && eval "$2"' sh "$host" "$*"
