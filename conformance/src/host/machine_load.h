// How busy the machine was while a run measured it (report.json "machine_load"; docs/nfr.md,
// "How busy the machine was"). Latency figures on a shared 2-vCPU VM move with whatever else
// runs there (other builds, a neighbouring VM); a figure without this beside it cannot be told
// apart from a slower runtime. Read from outside every target:
//
//   /proc/stat           jiffies of all CPUs: busy (not idle/iowait), iowait, steal (time a
//                        hypervisor gave this VM's vCPUs to someone else)
//   /proc/pressure/cpu   PSI "some" total: time in which at least one task waited for a CPU
//   /proc/loadavg        the 1-minute load average, at the start and the end
//
// A file the kernel does not offer (no PSI without CONFIG_PSI) leaves its field null; nothing
// here fails a run.
//
// Thread-safety: ReadMachineLoad reads files; the parsers and DescribeMachineLoad are pure.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace sandcheck {

struct MachineLoadSample {
  double monotonic_s = 0;  // CLOCK_MONOTONIC when read
  // /proc/stat "cpu" line, summed over all CPUs (jiffies); total 0 = not read.
  unsigned long long total = 0, idle = 0, iowait = 0, steal = 0;
  std::optional<unsigned long long> cpu_some_us;  // /proc/pressure/cpu "some total=" (µs)
  std::optional<double> loadavg1;                 // /proc/loadavg, first field
};

MachineLoadSample ReadMachineLoad();

// Parsers of the three files' text, for ReadMachineLoad and the tests. They fill what they
// find and return false on text that is not what the kernel writes (the sample keeps its
// earlier values then).
bool ParseProcStat(const std::string& text, MachineLoadSample* s);
bool ParseCpuPressure(const std::string& text, MachineLoadSample* s);
bool ParseLoadavg(const std::string& text, MachineLoadSample* s);

// {"seconds", "cpu_busy", "iowait", "steal", "cpu_pressure", "loadavg_start", "loadavg_end"}:
// the fractions are of all CPUs' time between the two samples (cpu_busy 1.0 = every CPU busy
// the whole time; cpu_pressure 0.25 = some task waited for a CPU a quarter of the time); a
// field that could not be read on either side is null. Counters that went backwards (not
// the same boot) are null too.
nlohmann::json DescribeMachineLoad(const MachineLoadSample& start, const MachineLoadSample& end);

// One line for people: "CPUs 63 % busy (steal 0 %, iowait 1 %), CPU pressure 12 %, load 1.2 →
// 3.4 over 21.9 s"; "" when `load` is not an object with any figure.
std::string MachineLoadLine(const nlohmann::json& load);

}  // namespace sandcheck
