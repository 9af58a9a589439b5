#include "coordinator/hosts.h"

#include <map>
#include <set>

#include "util/printable.h"

namespace hoist::coordinator {
namespace {

std::string ShortName(const std::string& name) { return name.substr(0, name.find('.')); }

// Equal, or equal up to the first '.' ("gpu1" and "gpu1.cluster").
bool SameHost(const std::string& a, const std::string& b) {
  return a == b || ShortName(a) == ShortName(b);
}

// "0-1, 3" for the sorted ranks.
std::string RankList(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

// "a: ranks 0-1; b: ranks 2-3", groups in order of their first rank.
std::string Placement(const std::vector<std::string>& where) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<int>> ranks;
  for (std::size_t r = 0; r < where.size(); ++r) {
    if (!ranks.count(where[r])) order.push_back(where[r]);
    ranks[where[r]].push_back(static_cast<int>(r));
  }
  std::string out;
  for (const std::string& w : order) {
    out += (out.empty() ? "" : "; ") + Printable(w) + ": ranks " + RankList(ranks[w]);
  }
  return out;
}

std::string Mismatch(const std::string& what, const std::vector<std::string>& topo,
                     const std::vector<std::string>& hosts) {
  return "the topology's nodes do not match the hosts the launcher started the ranks on: " + what +
         ". The launcher placed " + Placement(hosts) + "; the topology places " + Placement(topo) +
         ". List the nodes in the order the launcher fills hosts with ranks (mpirun's --host or "
         "--hostfile order with --map-by slot, Slurm's node list), each with as many GPUs as "
         "ranks it runs, or name the hosts the ranks run on";
}

// Label names across several hosts: every node one host, every host one node.
Status CheckLabels(const std::vector<std::string>& topo, const std::vector<std::string>& hosts) {
  std::map<std::string, std::string> host_of, node_of;
  for (std::size_t r = 0; r < hosts.size(); ++r) {
    const auto [h, new_node] = host_of.emplace(topo[r], hosts[r]);
    const auto [n, new_host] = node_of.emplace(hosts[r], topo[r]);
    if (!new_node && h->second != hosts[r]) {
      return Status::InvalidArgument(
          Mismatch("node '" + Printable(topo[r]) + "' spans hosts " + Printable(h->second) +
                       " and " + Printable(hosts[r]) + " (rank " + std::to_string(r) + ")",
                   topo, hosts));
    }
    if (!new_host && n->second != topo[r]) {
      return Status::InvalidArgument(
          Mismatch("host " + Printable(hosts[r]) + " runs ranks of nodes '" + Printable(n->second) +
                       "' and '" + Printable(topo[r]) + "' (rank " + std::to_string(r) + ")",
                   topo, hosts));
    }
  }
  return Status::Ok();
}

}  // namespace

Status CheckTopologyHosts(const std::vector<std::string>& node_names,
                          const std::vector<planner::RankLocation>& locations,
                          const std::vector<std::string>& hosts) {
  if (node_names.empty() || locations.size() != hosts.size()) return Status::Ok();
  std::vector<std::string> topo;  // each rank's node name
  for (const planner::RankLocation& l : locations) {
    if (l.node >= node_names.size()) return Status::Ok();  // not from a nodes list
    topo.push_back(node_names[l.node]);
  }
  bool names_are_hosts = false;
  for (const std::string& n : node_names) {
    for (const std::string& h : hosts) names_are_hosts = names_are_hosts || SameHost(n, h);
  }
  if (names_are_hosts) {
    for (std::size_t r = 0; r < hosts.size(); ++r) {
      if (!SameHost(topo[r], hosts[r])) {
        return Status::InvalidArgument(Mismatch("rank " + std::to_string(r) + " runs on host " +
                                                    Printable(hosts[r]) + ", not on node '" +
                                                    Printable(topo[r]) + "'",
                                                topo, hosts));
      }
    }
    return Status::Ok();
  }
  if (std::set<std::string>(hosts.begin(), hosts.end()).size() <= 1) return Status::Ok();
  return CheckLabels(topo, hosts);
}

}  // namespace hoist::coordinator
