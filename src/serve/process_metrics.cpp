#include "serve/process_metrics.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace gridq::serve {
namespace {

std::string slurp(const char* path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void family(std::string& o, const char* name, const char* type, const char* help, double v) {
  o += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, v);
}

}  // namespace

std::string process_metrics_text() {
  // /proc/self/stat: the command name (field 2) may hold spaces and parentheses, so fields are counted
  // after its last ')'. Then field 14 utime, 15 stime (clock ticks), 22 starttime (ticks after boot).
  const std::string stat = slurp("/proc/self/stat");
  const size_t rp = stat.rfind(')');
  if (rp == std::string::npos) return "";
  std::istringstream rest(stat.substr(rp + 1));
  std::vector<std::string> f;
  for (std::string x; rest >> x;) f.push_back(x);
  if (f.size() < 20) return "";  // f[0] is field 3
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double cpu = (std::stod(f[11]) + std::stod(f[12])) / tick;
  double btime = 0;
  std::istringstream ps(slurp("/proc/stat"));
  for (std::string line; std::getline(ps, line);)
    if (line.rfind("btime ", 0) == 0) btime = std::stod(line.substr(6));
  const double start = btime + std::stod(f[19]) / tick;
  std::istringstream statm(slurp("/proc/self/statm"));
  double pages_virtual = 0, pages_resident = 0;
  statm >> pages_virtual >> pages_resident;
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  std::error_code ec;
  double fds = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++fds;
  rlimit rl{};
  const double max_fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? static_cast<double>(rl.rlim_cur) : 0;

  std::string o;
  family(o, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", cpu);
  family(o, "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.",
         start);
  family(o, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
         pages_resident * page);
  family(o, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", pages_virtual * page);
  family(o, "process_open_fds", "gauge", "Number of open file descriptors.", fds);
  family(o, "process_max_fds", "gauge", "Maximum number of open file descriptors.", max_fds);
  return o;
}

}  // namespace gridq::serve
