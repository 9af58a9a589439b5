#!/usr/bin/env bash
# Open MPI's rsh agent for the namespace test bed (tests/hosts/bed.sh): `rsh_agent.sh HOST CMD...`
# runs CMD, as ssh would run it on HOST, inside HOST's network namespace (HOST is the namespace's
# name) and a fresh UTS namespace whose hostname is HOST. The filesystem is shared, as on a
# cluster with a shared checkpoint folder. --pdeathsig: the remote daemon dies with its launcher,
# as an ssh session's would (setpriv, util-linux).
set -euo pipefail
host="$1"
shift
exec ip netns exec "$host" unshare --uts -- /bin/sh -c 'hostname "$1" && eval "$2"' sh "$host" "$*"
