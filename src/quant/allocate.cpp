// Multi-choice knapsack for bit allocation (allocate.h, quantizer.md §7).
//
// Every unit starts at its cheapest option (fewest bits; ties: listed first). Choosing option o instead
// costs e_o extra bins and reduces the summed proxy by red_o = cost_base − cost_o. A suffix DP
//   S[u][b] = best total reduction of units u..n−1 using exactly b extra bins (−inf: impossible)
// is filled from the last unit back; the answer takes the largest S[0][b] over b ≤ capacity, ties to the
// fewest bins, and is rebuilt forward taking at each unit the first-listed option that attains the optimum.
// So among optimal plans the result is the one with the fewest (binned) bits, then the lexicographically
// smallest choice vector (lower unit index first, option listed first): fully deterministic.
//
// Bins. When every extra-bit count is an integer (exact serialized bits always are), the bin is their
// greatest common divisor and the DP is exact, provided the table stays small (kMaxCells); otherwise the
// bin is 0.001 bpw of the model and extras are rounded *up*, so the plan never exceeds the budget (it may
// leave up to one bin per unit unused).
#include "quant/allocate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "gridbook/rung.h"

namespace gridq::quant {
namespace {

constexpr int64_t kMaxCells = int64_t{1} << 24;  // DP table cells in exact mode (16 M doubles = 128 MiB)
constexpr double kBinBpw = 0.001;                // bin width of the fallback mode, bits per model weight
// Relative slack on the budget: a budget given as a decimal (2.3 bpw) times the parameter count is not
// exact in binary; 1e-12 of the total is far below one bit for any model up to 1e12 bits.
constexpr double kBudgetSlack = 1e-12;

bool is_integral(double x) { return x >= 0 && x < 9007199254740992.0 && std::floor(x) == x; }

}  // namespace

Expected<double> matrix_bits(const std::string& format, int64_t R, int64_t C, int layout_version) {
  if (R <= 0 || C <= 0) return err("matrix_bits: {} [{}, {}] is empty", format, R, C);
  const double r = static_cast<double>(R), c = static_cast<double>(C);
  if (format == "BF16") return 16 * r * c;
  if (format == "FP8_DYNAMIC") return 8 * r * c + 32 * r;
  GRIDQ_ASSIGN_OR_RETURN(gridbook::Rung rung, gridbook::parse_rung_name(format, layout_version));
  if (C % gridbook::kSuperblock != 0)
    return err("matrix_bits: {} needs C % 256 == 0, C = {} (format.md §4)", format, C);
  const double body = r * static_cast<double>(C / gridbook::kSuperblock) * rung.type_size() * 8;
  return rung.grid == gridbook::Grid::FP8 ? body + 32 * r : body;
}

Expected<AllocPlan> allocate(const std::vector<AllocUnit>& units, double budget_bpw) {
  if (units.empty()) return err("allocate: no units");
  if (!std::isfinite(budget_bpw) || budget_bpw <= 0)
    return err("allocate: budget {} bpw is not a positive finite number", budget_bpw);
  const size_t n = units.size();
  double params = 0;
  std::vector<int> base(n, 0);
  for (size_t u = 0; u < n; ++u) {
    const AllocUnit& U = units[u];
    if (U.params <= 0) return err("allocate: unit '{}' has {} params (must be > 0)", U.name, U.params);
    if (U.options.empty()) return err("allocate: unit '{}' has no options", U.name);
    for (size_t o = 0; o < U.options.size(); ++o) {
      const AllocOption& op = U.options[o];
      if (!std::isfinite(op.bits) || op.bits < 0 || !std::isfinite(op.cost) || op.cost < 0)
        return err("allocate: unit '{}' option {} ({}): bits {} and cost {} must be finite and >= 0", U.name,
                   o, op.format, op.bits, op.cost);
      if (op.bits < U.options[base[u]].bits) base[u] = static_cast<int>(o);
    }
    params += static_cast<double>(U.params);
  }

  double base_bits = 0, max_bits = 0;
  for (size_t u = 0; u < n; ++u) {
    base_bits += units[u].options[base[u]].bits;
    double mx = 0;
    for (const AllocOption& op : units[u].options) mx = std::max(mx, op.bits);
    max_bits += mx;
  }
  const double budget_bits = budget_bpw * params;
  const double capacity = budget_bits * (1 + kBudgetSlack) - base_bits;
  if (capacity < 0) {
    return err(
        "allocate: budget {} bpw is below the cheapest plan: reachable bpw over these {} units is [{}, {}]",
        budget_bpw, n, base_bits / params, max_bits / params);
  }

  // Extra bits per option, then the bin width.
  std::vector<std::vector<double>> extra(n);
  bool integral = true;
  int64_t g = 0;
  double max_extra_total = 0;
  for (size_t u = 0; u < n; ++u) {
    const double b0 = units[u].options[base[u]].bits;
    double mx = 0;
    for (const AllocOption& op : units[u].options) {
      const double e = op.bits - b0;
      extra[u].push_back(e);
      mx = std::max(mx, e);
      if (!is_integral(op.bits) || !is_integral(b0)) integral = false;
      if (integral && e > 0) g = std::gcd(g, static_cast<int64_t>(e));
    }
    max_extra_total += mx;
  }
  const double reach = std::min(capacity, max_extra_total);  // no plan uses more extra bits than this
  double bin = 0;
  int64_t B = 0;  // bins in the table: 0..B
  bool exact = false;
  if (integral) {
    if (g == 0) {
      exact = true;  // every unit has one bit count: nothing to choose
      bin = 1;
      B = 0;
    } else if ((std::floor(reach / static_cast<double>(g)) + 1) * static_cast<double>(n + 1) <=
               double(kMaxCells)) {
      exact = true;
      bin = static_cast<double>(g);
      B = static_cast<int64_t>(std::floor(reach / bin));
    }
  }
  if (!exact) {
    bin = kBinBpw * params;
    B = static_cast<int64_t>(std::floor(capacity / bin));
    B = std::min<int64_t>(B,
                          static_cast<int64_t>(std::ceil(max_extra_total / bin)) + static_cast<int64_t>(n));
    if (static_cast<double>(B + 1) * static_cast<double>(n + 1) > 4.0 * double(kMaxCells))
      return err("allocate: {} units x {} bins of {} bits is too large a table", n, B + 1, bin);
  }
  // Bins per option (exact: e / g; binned: rounded up so the binned plan bounds the real bits).
  std::vector<std::vector<int64_t>> ebins(n);
  for (size_t u = 0; u < n; ++u)
    for (double e : extra[u])
      ebins[u].push_back(e <= 0  ? 0
                         : exact ? static_cast<int64_t>(e / bin)
                                 : static_cast<int64_t>(std::ceil(e / bin)));

  const double kNone = -std::numeric_limits<double>::infinity();
  const size_t W = static_cast<size_t>(B + 1);
  std::vector<double> S((n + 1) * W, kNone);  // [n + 1, B + 1]
  S[n * W + 0] = 0.0;
  for (size_t u = n; u-- > 0;) {
    const AllocUnit& U = units[u];
    const double c0 = U.options[base[u]].cost;
    const double* next = &S[(u + 1) * W];
    double* cur = &S[u * W];
    for (size_t o = 0; o < U.options.size(); ++o) {
      const int64_t e = ebins[u][o];
      if (e > B) continue;
      const double red = c0 - U.options[o].cost;
      for (int64_t b = e; b <= B; ++b) {
        const double prev = next[b - e];
        if (prev == kNone) continue;
        const double v = prev + red;
        if (v > cur[b]) cur[b] = v;
      }
    }
  }
  int64_t best_b = -1;
  for (int64_t b = 0; b <= B; ++b)
    if (S[b] != kNone && (best_b < 0 || S[b] > S[best_b])) best_b = b;
  if (best_b < 0) return err("allocate: internal error: no feasible plan in the table");

  AllocPlan plan;
  plan.choice.assign(n, -1);
  int64_t b = best_b;
  for (size_t u = 0; u < n; ++u) {
    const AllocUnit& U = units[u];
    const double c0 = U.options[base[u]].cost;
    const double want = S[u * W + static_cast<size_t>(b)];
    for (size_t o = 0; o < U.options.size(); ++o) {
      const int64_t e = ebins[u][o];
      if (e > b) continue;
      const double prev = S[(u + 1) * W + static_cast<size_t>(b - e)];
      if (prev != kNone && prev + (c0 - U.options[o].cost) == want) {
        plan.choice[u] = static_cast<int>(o);
        b -= e;
        break;
      }
    }
    if (plan.choice[u] < 0) return err("allocate: internal error: cannot rebuild unit '{}'", U.name);
  }
  for (size_t u = 0; u < n; ++u) {
    plan.bits += units[u].options[plan.choice[u]].bits;
    plan.cost += units[u].options[plan.choice[u]].cost;
  }
  plan.bpw = plan.bits / params;
  if (plan.bits > budget_bits * (1 + kBudgetSlack))
    return err("allocate: internal error: plan uses {} bits over a budget of {}", plan.bits, budget_bits);
  return plan;
}

std::vector<PlanCandidate> uniform_plans(const std::vector<AllocUnit>& units, double budget_bpw) {
  std::vector<PlanCandidate> out;
  if (units.empty()) return out;
  double params = 0;
  for (const AllocUnit& u : units) params += static_cast<double>(u.params);
  for (const AllocOption& first : units.front().options) {
    AllocPlan p;
    bool all = true;
    for (const AllocUnit& u : units) {
      int k = -1;
      for (size_t o = 0; o < u.options.size() && k < 0; ++o)
        if (u.options[o].format == first.format) k = static_cast<int>(o);
      if (k < 0) {
        all = false;
        break;
      }
      p.choice.push_back(k);
      p.bits += u.options[static_cast<size_t>(k)].bits;
      p.cost += u.options[static_cast<size_t>(k)].cost;
    }
    if (!all || p.bits > budget_bpw * params * (1 + kBudgetSlack)) continue;
    p.bpw = p.bits / params;
    out.push_back({"uniform " + first.format, std::move(p), 0.0});
  }
  return out;
}

Expected<MeasuredAllocation> allocate_measured(
    const std::vector<AllocUnit>& units, const std::vector<std::vector<double>>& sens, double budget_bpw,
    const std::function<Expected<double>(const std::vector<int>& choice)>& check_kl) {
  if (sens.size() != units.size())
    return err("allocate: {} sensitivity rows for {} units", sens.size(), units.size());
  std::vector<AllocUnit> measured = units;  // the same options, costed by the measured KL
  for (size_t u = 0; u < units.size(); ++u) {
    if (sens[u].size() != units[u].options.size())
      return err("allocate: unit '{}' has {} sensitivities for {} options", units[u].name, sens[u].size(),
                 units[u].options.size());
    for (size_t o = 0; o < sens[u].size(); ++o) {
      if (!std::isfinite(sens[u][o]) || sens[u][o] < 0)
        return err("allocate: unit '{}' option {}: measured KL {} must be finite and >= 0", units[u].name,
                   units[u].options[o].format, sens[u][o]);
      measured[u].options[o].cost = sens[u][o];
    }
  }
  GRIDQ_ASSIGN_OR_RETURN(AllocPlan by_sens, allocate(measured, budget_bpw));
  GRIDQ_ASSIGN_OR_RETURN(AllocPlan by_proxy, allocate(units, budget_bpw));
  by_sens.cost = 0;  // report every candidate's cost as the proxy D of its choice
  for (size_t u = 0; u < units.size(); ++u) by_sens.cost += units[u].options[by_sens.choice[u]].cost;

  MeasuredAllocation m;
  m.candidates = uniform_plans(units, budget_bpw);
  for (auto& [label, plan] : {std::pair{"measured", by_sens}, std::pair{"proxy", by_proxy}}) {
    bool dup = false;
    for (const PlanCandidate& c : m.candidates) dup = dup || c.plan.choice == plan.choice;
    if (!dup) m.candidates.push_back({label, plan, 0.0});
  }
  for (size_t i = 0; i < m.candidates.size(); ++i) {
    PlanCandidate& c = m.candidates[i];
    GRIDQ_ASSIGN_OR_RETURN(c.check_kl, check_kl(c.plan.choice));
    if (!std::isfinite(c.check_kl)) return err("allocate: plan '{}' measured a non-finite KL", c.label);
    if (c.check_kl < m.candidates[m.chosen].check_kl) m.chosen = i;  // strict: ties keep the earlier
  }
  return m;
}

}  // namespace gridq::quant
