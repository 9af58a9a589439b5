// Matching the topology file's nodes to the hosts the ranks really run on.
//
// The topology's `nodes` list says which node each rank runs on (in rank order); the launcher
// (mpirun's host list and mapping, Slurm's allocation) decides where it does. Node dedup, the
// peer (CUDA IPC only within a host) and the ranks sharing a node's disk all trust the plan's
// nodes, so they must be the hosts. CheckTopologyHosts compares them, with the host names the
// ranks reported (gethostname):
//  - names that are host names: when any node name is the name of a host a rank runs on (equal,
//    or equal up to the first '.' on either side), every rank must run on the host its node
//    names;
//  - names that are labels ("node-a"): when every rank runs on one host, the nodes are simulated
//    on it (as the tests do) and anything goes; across several hosts each node must be exactly
//    one host (no node spanning hosts, no two nodes on one host).
// Anything else is InvalidArgument (exit 2) naming the first rank that disagrees, where the
// launcher put every rank and where the topology puts it, and the fix.
//
// Threading: pure.
#pragma once

#include <string>
#include <vector>

#include "hoist/status.h"
#include "planner/plan_options.h"

namespace hoist::coordinator {

// node_names: the topology's nodes by index (empty: no nodes list, nothing to check);
// locations: each rank's node index and gpu (from the nodes list); hosts: each rank's host name,
// in rank order.
Status CheckTopologyHosts(const std::vector<std::string>& node_names,
                          const std::vector<planner::RankLocation>& locations,
                          const std::vector<std::string>& hosts);

}  // namespace hoist::coordinator
