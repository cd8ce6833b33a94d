#include "supervisor/host_roster.h"

#include <algorithm>
#include <sstream>

#include "common/error.h"

namespace sluice::supervisor {

HostRoster::HostRoster(const std::string& hosts, int data_per_node) : data_per_node_(data_per_node) {
  std::istringstream list(hosts);
  for (std::string item; std::getline(list, item, ',');) {
    if (item.empty()) continue;
    RosterHost host;
    const auto colon = item.find(':');
    host.name = item.substr(0, colon);
    if (colon != std::string::npos) {
      try {
        host.slots = std::stoi(item.substr(colon + 1));
      } catch (const std::exception&) {
        host.slots = 0;
      }
    }
    if (host.name.empty() || host.slots < 1) {
      throw ConfigError("--hosts: '" + item + "' is not NAME or NAME:RANKS with RANKS >= 1 (e.g. node1:4)");
    }
    const bool twice = std::any_of(hosts_.begin(), hosts_.end(), [&](const RosterHost& h) { return h.name == host.name; });
    if (twice) throw ConfigError("--hosts: host " + host.name + " is given twice; give each host once with its rank count");
    hosts_.push_back(host);
  }
}

int HostRoster::model_ranks_of(const RosterHost& host) const {
  const int data = data_per_node_ >= 0 ? data_per_node_ : (host.slots >= 2 ? 1 : 0);
  return std::max(0, host.slots - data);
}

std::string HostRoster::kept_list() const {
  std::string out;
  for (const RosterHost& h : hosts_) {
    if (!h.left_out) out += (out.empty() ? "" : ",") + h.name + ":" + std::to_string(h.slots);
  }
  return out;
}

std::string HostRoster::left_out_list() const {
  std::string out;
  for (const RosterHost& h : hosts_) {
    if (h.left_out) out += (out.empty() ? "" : ",") + h.name;
  }
  return out;
}

int HostRoster::kept_hosts() const {
  return static_cast<int>(std::count_if(hosts_.begin(), hosts_.end(), [](const RosterHost& h) { return !h.left_out; }));
}

int HostRoster::uniform_slots() const {
  int slots = 0;
  for (const RosterHost& h : hosts_) {
    if (h.left_out) continue;
    if (slots != 0 && h.slots != slots) return 0;
    slots = h.slots;
  }
  return slots;
}

int HostRoster::kept_ranks() const {
  int ranks = 0;
  for (const RosterHost& h : hosts_) ranks += h.left_out ? 0 : h.slots;
  return ranks;
}

int HostRoster::kept_model_ranks() const {
  int ranks = 0;
  for (const RosterHost& h : hosts_) ranks += h.left_out ? 0 : model_ranks_of(h);
  return ranks;
}

int HostRoster::model_ranks_without(const std::string& host) const {
  int ranks = 0;
  for (const RosterHost& h : hosts_) ranks += (h.left_out || h.name == host) ? 0 : model_ranks_of(h);
  return ranks;
}

std::optional<std::string> HostRoster::count(const RoundFault& fault, int leave_out_after, int min_model_ranks) {
  const auto it = std::find_if(hosts_.begin(), hosts_.end(), [&](const RosterHost& h) { return h.name == fault.host; });
  if (fault.host.empty() || it == hosts_.end() || it->left_out) return std::nullopt;
  ++it->named;
  const bool named_enough = leave_out_after > 0 && it->named >= leave_out_after;
  // One hardware-looking fault leaves the host out only where the rest can go on without it.
  const bool hardware = fault.hardware_looking() && model_ranks_without(it->name) >= min_model_ranks;
  if (!named_enough && !hardware) return std::nullopt;
  it->left_out = true;
  it->why = named_enough ? "named by " + std::to_string(it->named) + " faults, the last: " + fault.describe()
                         : "a fault that looks like the node's: " + fault.describe();
  return it->name;
}

}  // namespace sluice::supervisor
