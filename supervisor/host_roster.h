#pragma once
// The hosts a supervised job may run on, and which of them are left out (supervisor.h).
//
// A host is left out when it has been named by `leave_out_after` rounds' faults, or by one fault
// that looks like hardware (a rank killed by a signal, a lost node or link: RoundFault) as long as
// the hosts that remain still hold `min_model_ranks`: one such fault is a hint, and a job on one
// node retries there instead of stopping. Without a host list (mpirun's own placement) nothing can
// be left out. Bounded by the host count (a host name and two numbers each).
#include <optional>
#include <string>
#include <vector>

#include "supervisor/round_fault.h"

namespace sluice::supervisor {

struct RosterHost {
  std::string name;
  int slots = 1;       // ranks on it
  int named = 0;       // how many rounds' faults named it
  bool left_out = false;
  std::string why;     // when left out: the fault that did it
};

class HostRoster {
 public:
  // `hosts`: "name:slots,name:slots,..." (":slots" defaults to 1); empty: no host list.
  // `data_per_node`: as roles.data_per_node (-1: one data rank on a host with two or more ranks).
  // Throws ConfigError on a malformed list or a host given twice.
  HostRoster(const std::string& hosts, int data_per_node);

  bool empty() const { return hosts_.empty(); }
  // The hosts of the next round, as mpirun's --host wants them ("a:3,b:3").
  std::string kept_list() const;
  // The left-out hosts, comma-separated (srun's --exclude).
  std::string left_out_list() const;
  int kept_hosts() const;
  // The ranks per kept host when every kept host has the same count (srun --ntasks-per-node),
  // else 0.
  int uniform_slots() const;
  int kept_ranks() const;
  // Model ranks of a round on the kept hosts (ranks minus data ranks, roles.data_per_node's rule).
  int kept_model_ranks() const;
  // Model ranks were `host` left out too.
  int model_ranks_without(const std::string& host) const;
  // Counts the fault against its host; returns the host left out by it, if any. A host not in the
  // list (or a fault without a host) changes nothing.
  std::optional<std::string> count(const RoundFault& fault, int leave_out_after, int min_model_ranks);
  const std::vector<RosterHost>& hosts() const { return hosts_; }

 private:
  int model_ranks_of(const RosterHost& host) const;

  std::vector<RosterHost> hosts_;
  int data_per_node_ = -1;
};

}  // namespace sluice::supervisor
