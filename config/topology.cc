#include "config/topology.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <type_traits>
#include <variant>

#include "config/option_table.h"
#include "util/printable.h"
#include "util/suggest.h"

namespace hoist::config {
namespace {

// The keys besides the options (config/option_table.h): the nodes list, `hoist serve`'s, and the
// deprecated staging mapping.
const char* const kOtherKeys[] = {"nodes", "socket_dir", "allow_uids", "host_cache", "staging"};
const std::set<std::string> kStagingKeys = {"slots", "slot_mib", "threads"};
const std::set<std::string> kNodeKeys = {"name", "gpus"};

std::set<std::string> TopKeys() {
  std::set<std::string> keys(std::begin(kOtherKeys), std::end(kOtherKeys));
  for (const OptionInfo& o : kOptions) keys.emplace(o.name);
  return keys;
}

// Every key of `map` is a string, appears once and is one of `ok`.
Status CheckKeys(const std::string& label, const YAML::Node& map, const std::set<std::string>& ok,
                 const std::string& where) {
  std::map<std::string, int> seen;  // key -> line (1-based)
  for (const auto& kv : map) {
    const int line = kv.first.Mark().line + 1;
    if (!kv.first.IsScalar()) {
      return Status::InvalidArgument(label + ": line " + std::to_string(line) + ": a key" + where +
                                     " is not a string");
    }
    const std::string key = kv.first.Scalar();
    if (!ok.count(key)) {
      const std::string near = Nearest(key, std::vector<std::string>(ok.begin(), ok.end()));
      std::string allowed;
      for (const auto& k : ok) allowed += (allowed.empty() ? "" : ", ") + k;
      return Status::InvalidArgument(label + ": line " + std::to_string(line) + ": unknown key '" +
                                     Printable(key) + "'" + where +
                                     (near.empty() ? "" : " (did you mean '" + near + "'?)") +
                                     "; the keys are " + allowed);
    }
    if (auto [it, fresh] = seen.emplace(key, line); !fresh) {
      return Status::InvalidArgument(label + ": key '" + key + "'" + where +
                                     " appears twice (lines " + std::to_string(it->second) +
                                     " and " + std::to_string(line) + ")");
    }
  }
  return Status::Ok();
}

// What a key of type T must hold, for messages.
template <typename T>
const char* Expected() {
  if constexpr (std::is_same_v<T, bool>) return "true or false";
  if constexpr (std::is_same_v<T, int> || std::is_same_v<T, long long>) return "a whole number";
  if constexpr (std::is_same_v<T, double>) return "a number";
  if constexpr (std::is_same_v<T, std::string>) return "a string";
  return "a list of whole numbers";
}

template <typename T>
Status Get(const std::string& label, const YAML::Node& map, const char* key,
           std::optional<T>* out) {
  const YAML::Node v = map[key];
  if (!v) return Status::Ok();
  try {
    *out = v.as<T>();
  } catch (const YAML::Exception& e) {
    const std::string shown = v.IsScalar() ? " '" + Printable(v.Scalar()) + "'" : "";
    return Status::InvalidArgument(
        label + ": line " + std::to_string(v.Mark().line + 1) + ": key '" + key + "' must be " +
        Expected<T>() + ", not" +
        (shown.empty() ? " a " + std::string(v.IsMap() ? "mapping" : "list") : shown));
  }
  return Status::Ok();
}

// The nodes list: each entry a mapping {name, gpus}, names unique, gpus non-empty. The GPU
// ordinals' range is checked with the other numbers (config/job_spec.h).
Status ParseNodes(const std::string& label, const YAML::Node& nodes, std::vector<NodeSpec>* out) {
  if (!nodes.IsSequence()) return Status::InvalidArgument(label + ": 'nodes' must be a list");
  std::set<std::string> names;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const YAML::Node n = nodes[i];
    const std::string where = " in nodes[" + std::to_string(i) + "]";
    if (!n.IsMap()) {
      return Status::InvalidArgument(label + ": nodes[" + std::to_string(i) +
                                     "] must be a mapping");
    }
    HOIST_RETURN_IF_ERROR(CheckKeys(label, n, kNodeKeys, where));
    NodeSpec spec;
    std::optional<std::string> name;
    std::optional<std::vector<int>> gpus;
    HOIST_RETURN_IF_ERROR(Get(label, n, "name", &name));
    HOIST_RETURN_IF_ERROR(Get(label, n, "gpus", &gpus));
    spec.name = name.value_or("node" + std::to_string(i));
    if (!names.insert(spec.name).second) {
      return Status::InvalidArgument(label + ": node name '" + Printable(spec.name) +
                                     "' appears twice");
    }
    if (!gpus || gpus->empty()) {
      return Status::InvalidArgument(label + ": 'gpus' missing or empty" + where);
    }
    // A GPU may appear twice: two ranks sharing one device is legal (and how one-GPU machines
    // run multi-rank jobs).
    spec.gpus = *gpus;
    out->push_back(spec);
  }
  return Status::Ok();
}

// One option's value, typed by its entry in kOptions.
Status GetOption(const std::string& label, const YAML::Node& map, const OptionInfo& info,
                 Topology* t) {
  const OptionField field = info.field(*t);
  return std::visit([&](auto* out) { return Get(label, map, std::string(info.name).c_str(), out); },
                    field);
}

// The deprecated `staging: {slots, slot_mib, threads}` mapping: each key there is the option of
// the same name, and must not also be given at the top level.
Status ParseStagingMapping(const std::string& label, const YAML::Node& st, Topology* t) {
  if (!st.IsMap()) return Status::InvalidArgument(label + ": 'staging' must be a mapping");
  HOIST_RETURN_IF_ERROR(CheckKeys(label, st, kStagingKeys, " in 'staging'"));
  t->warnings.push_back(label + ": line " + std::to_string(st.Mark().line + 1) + ": " +
                        std::string(kDeprecatedStagingKey));
  for (const auto& kv : st) {
    const std::string key = kv.first.Scalar();
    if (t->keys.count(key)) {
      return Status::InvalidArgument(label + ": '" + key +
                                     "' is given twice, as a top-level key "
                                     "and in 'staging'");
    }
    HOIST_RETURN_IF_ERROR(GetOption(label, st, *FindOption(key), t));
    t->keys[key] = "staging." + key;
  }
  return Status::Ok();
}

Result<Topology> ParseRoot(const std::string& label, const YAML::Node& root) {
  if (!root.IsMap()) return Status::InvalidArgument(label + ": top level must be a mapping");
  HOIST_RETURN_IF_ERROR(CheckKeys(label, root, TopKeys(), ""));
  Topology t;
  for (const OptionInfo& o : kOptions) {
    if (!root[std::string(o.name)]) continue;
    HOIST_RETURN_IF_ERROR(GetOption(label, root, o, &t));
    t.keys[std::string(o.name)] = std::string(o.name);
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
    HOIST_RETURN_IF_ERROR(ParseStagingMapping(label, st, &t));
  }
  if (const YAML::Node nodes = root["nodes"]) {
    HOIST_RETURN_IF_ERROR(ParseNodes(label, nodes, &t.nodes));
  }
  return t;
}

}  // namespace

Result<Topology> ParseTopology(const std::string& label, const std::string& yaml_text) {
  // yaml-cpp reports through exceptions; none may leave this function.
  try {
    return ParseRoot(label, YAML::Load(yaml_text));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(label + ": invalid YAML: " + Printable(e.what()));
  } catch (const std::exception& e) {
    return Status::InvalidArgument(label + ": cannot read the topology: " + Printable(e.what()));
  }
}

Result<Topology> LoadTopology(const std::string& path) {
  constexpr off_t kMaxBytes = 1 << 20;
  // Non-blocking, so that a FIFO cannot stall the open; then only a regular file is read.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return Status::InvalidArgument(path +
                                   ": cannot open the topology file: " + std::strerror(errno));
  }
  struct stat st {};
  std::string text;
  Status s;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    s = Status::InvalidArgument(path + ": the topology is not a regular file");
  } else if (st.st_size > kMaxBytes) {
    s = Status::InvalidArgument(path + ": the topology file has " + std::to_string(st.st_size) +
                                " bytes, more than the limit of " + std::to_string(kMaxBytes));
  } else {
    text.resize(static_cast<std::size_t>(st.st_size));
    std::size_t got = 0;
    while (s.ok() && got < text.size()) {
      const ssize_t r = ::read(fd, text.data() + got, text.size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        s = Status::IoError(
            path + ": reading the topology file: " + (r < 0 ? std::strerror(errno) : "it shrank"));
      } else {
        got += static_cast<std::size_t>(r);
      }
    }
  }
  ::close(fd);
  if (!s.ok()) return s;
  return ParseTopology(path, text);
}

int NodesWorld(const Topology& t) {
  int n = 0;
  for (const auto& node : t.nodes) n += static_cast<int>(node.gpus.size());
  return n;
}

}  // namespace hoist::config
