// The standard process_* metrics every Prometheus client library exports (prometheus_client's
// ProcessCollector names, issue 14 item 10), read from /proc/self on each scrape: resident and virtual
// memory, CPU seconds, start time, open and maximum file descriptors. Empty where /proc is missing.
#pragma once

#include <string>

namespace gridq::serve {

std::string process_metrics_text();

}  // namespace gridq::serve
