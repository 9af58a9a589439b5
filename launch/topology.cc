#include "launch/topology.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <set>
#include <sstream>

namespace hoist::launch {
namespace {

const std::set<std::string> kTopKeys = {"model", "tp", "ep", "dp", "layout", "placement", "read",
                                        "device", "staging", "verify", "nodes",
                                        // `hoist serve`
                                        "socket_dir", "allow_uids", "host_cache",
                                        // dedup (planner/dedup.h, rank/exchange.h)
                                        "dedup", "peer_timeout_s", "cpu_bind",
                                        "unexpected_tensors"};  // planner/plan_options.h
const std::set<std::string> kStagingKeys = {"slots", "slot_mib", "threads"};
const std::set<std::string> kNodeKeys = {"name", "gpus"};

Status CheckKeys(const std::string& label, const YAML::Node& map, const std::set<std::string>& ok,
                 const std::string& where) {
  for (const auto& kv : map) {
    const std::string key = kv.first.as<std::string>();
    if (!ok.count(key)) {
      std::string allowed;
      for (const auto& k : ok) allowed += (allowed.empty() ? "" : ", ") + k;
      return Status::InvalidArgument(label + ": unknown key '" + key + "'" + where +
                                     " (allowed: " + allowed + ")");
    }
  }
  return Status::Ok();
}

template <typename T>
Status Get(const std::string& label, const YAML::Node& map, const char* key,
           std::optional<T>* out) {
  if (!map[key]) return Status::Ok();
  try {
    *out = map[key].as<T>();
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(label + ": key '" + key + "' has the wrong type (line " +
                                   std::to_string(map[key].Mark().line + 1) + ")");
  }
  return Status::Ok();
}

}  // namespace

Result<Topology> ParseTopology(const std::string& label, const std::string& yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(label + ": invalid YAML: " + e.what());
  }
  if (!root.IsMap()) return Status::InvalidArgument(label + ": top level must be a mapping");
  HOIST_RETURN_IF_ERROR(CheckKeys(label, root, kTopKeys, ""));
  Topology t;
  std::optional<std::string> model;
  HOIST_RETURN_IF_ERROR(Get(label, root, "model", &model));
  if (model) t.model = *model;
  HOIST_RETURN_IF_ERROR(Get(label, root, "tp", &t.tp));
  HOIST_RETURN_IF_ERROR(Get(label, root, "ep", &t.ep));
  HOIST_RETURN_IF_ERROR(Get(label, root, "dp", &t.dp));
  HOIST_RETURN_IF_ERROR(Get(label, root, "layout", &t.layout));
  HOIST_RETURN_IF_ERROR(Get(label, root, "placement", &t.placement));
  HOIST_RETURN_IF_ERROR(Get(label, root, "read", &t.read));
  HOIST_RETURN_IF_ERROR(Get(label, root, "device", &t.device));
  HOIST_RETURN_IF_ERROR(Get(label, root, "verify", &t.verify));
  HOIST_RETURN_IF_ERROR(Get(label, root, "dedup", &t.dedup));
  if (t.dedup && *t.dedup != "none" && *t.dedup != "node" && *t.dedup != "job" &&
      *t.dedup != "auto") {
    return Status::InvalidArgument(label + ": dedup '" + *t.dedup +
                                   "' is not auto, none, node or job");
  }
  HOIST_RETURN_IF_ERROR(Get(label, root, "cpu_bind", &t.cpu_bind));
  HOIST_RETURN_IF_ERROR(Get(label, root, "peer_timeout_s", &t.peer_timeout_s));
  if (t.peer_timeout_s && !(*t.peer_timeout_s > 0)) {
    return Status::InvalidArgument(label + ": peer_timeout_s must be > 0");
  }
  HOIST_RETURN_IF_ERROR(Get(label, root, "unexpected_tensors", &t.unexpected_tensors));
  if (t.unexpected_tensors && *t.unexpected_tensors != "error" && *t.unexpected_tensors != "warn" &&
      *t.unexpected_tensors != "ignore") {
    return Status::InvalidArgument(label + ": unexpected_tensors '" + *t.unexpected_tensors +
                                   "' is not error, warn or ignore");
  }
  HOIST_RETURN_IF_ERROR(Get(label, root, "socket_dir", &t.socket_dir));
  HOIST_RETURN_IF_ERROR(Get(label, root, "allow_uids", &t.allow_uids));
  HOIST_RETURN_IF_ERROR(Get(label, root, "host_cache", &t.host_cache));
  for (long long uid : t.allow_uids.value_or(std::vector<long long>{})) {
    if (uid < 0 || uid > 0xfffffffell) {
      return Status::InvalidArgument(label + ": allow_uids: " + std::to_string(uid) +
                                     " is not a uid");
    }
  }
  if (const YAML::Node st = root["staging"]) {
    if (!st.IsMap()) return Status::InvalidArgument(label + ": 'staging' must be a mapping");
    HOIST_RETURN_IF_ERROR(CheckKeys(label, st, kStagingKeys, " in 'staging'"));
    HOIST_RETURN_IF_ERROR(Get(label, st, "slots", &t.slots));
    HOIST_RETURN_IF_ERROR(Get(label, st, "slot_mib", &t.slot_mib));
    HOIST_RETURN_IF_ERROR(Get(label, st, "threads", &t.threads));
  }
  if (const YAML::Node nodes = root["nodes"]) {
    if (!nodes.IsSequence()) return Status::InvalidArgument(label + ": 'nodes' must be a list");
    std::set<std::string> names;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const YAML::Node n = nodes[i];
      const std::string where = " in nodes[" + std::to_string(i) + "]";
      if (!n.IsMap())
        return Status::InvalidArgument(label + ": nodes[" + std::to_string(i) +
                                       "] must be a mapping");
      HOIST_RETURN_IF_ERROR(CheckKeys(label, n, kNodeKeys, where));
      NodeSpec spec;
      std::optional<std::string> name;
      std::optional<std::vector<int>> gpus;
      HOIST_RETURN_IF_ERROR(Get(label, n, "name", &name));
      HOIST_RETURN_IF_ERROR(Get(label, n, "gpus", &gpus));
      spec.name = name.value_or("node" + std::to_string(i));
      if (!names.insert(spec.name).second) {
        return Status::InvalidArgument(label + ": node name '" + spec.name + "' appears twice");
      }
      if (!gpus || gpus->empty()) {
        return Status::InvalidArgument(label + ": 'gpus' missing or empty" + where);
      }
      // A GPU may appear twice: two ranks sharing one device is legal (and how one-GPU
      // machines run multi-rank jobs).
      for (int g : *gpus) {
        if (g < 0) {
          return Status::InvalidArgument(label + ": gpu " + std::to_string(g) + " is negative" +
                                         where);
        }
      }
      spec.gpus = *gpus;
      t.nodes.push_back(spec);
    }
  }
  for (const auto* v : {&t.tp, &t.dp, &t.slots, &t.slot_mib, &t.threads}) {
    if (*v && **v < 1) return Status::InvalidArgument(label + ": sizes must be >= 1");
  }
  if (t.ep && *t.ep < 0) return Status::InvalidArgument(label + ": ep must be >= 0");
  return t;
}

Result<Topology> LoadTopology(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(path + ": cannot open topology file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseTopology(path, ss.str());
}

int NodesWorld(const Topology& t) {
  int n = 0;
  for (const auto& node : t.nodes) n += static_cast<int>(node.gpus.size());
  return n;
}

}  // namespace hoist::launch
