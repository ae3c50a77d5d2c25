// gate/ — verdicts on a report's measurements (this file). May include report/ and every
// folder below; not run/.
//
// `sandcheck gate`: verdicts on the measurements of a report.json (docs/nfr.md).
//
//  * Absolute gates — product limits (NFR-1..NFR-5 of the latency-target file): the gated
//    percentile of every measurement named after a target, on the target's clock, recomputed
//    from the raw samples, must be strictly below the limit. A target the report skipped is a
//    skip (with the report's reason); one the report could not measure (fail / error) fails.
//  * Ratio gates — regressions against a baseline report measured on the SAME machine: for every
//    measurement present in both (same name, scenario, target, backend, clock) with enough
//    samples, current ÷ baseline of the chosen statistic must not exceed 1 + tolerance (and,
//    with a noise floor, the difference must also exceed it). The machine's floor measurement is
//    shown, not gated. A baseline from another host is bad input unless allowed.
//
// Nothing to gate at all (no absolute and no ratio gate evaluated) is a failure: a report that
// measured nothing must not pass CI.
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sbx/status.h"
#include "scenario/nfr_spec.h"

namespace sandcheck {

struct GateOptions {
  double tolerance = 0.10;        // ratio gates: allowed growth (0.10 = +10 %)
  std::string statistic = "p50";  // ratio gates: p50 | p95 | p99 | mean
  int min_samples = 5;            // ratio gates: fewer samples on either side → skip
  double min_delta_s = 0;         // ratio gates: a growth below this is noise, never a failure
  bool allow_other_host = false;  // ratio gates against a baseline from another machine
};

struct GateResult {
  std::string id;           // stable: "absolute:<check id>" / "ratio:<name>/<backend>/<clock>"
  std::string kind;         // absolute | ratio
  std::string requirement;  // NFR-x for absolute gates
  std::string outcome;      // pass | fail | skip
  std::string message;
  double value = -1;     // the statistic measured now (s)
  double limit = -1;     // absolute: the limit; ratio: baseline × (1 + tolerance)
  double baseline = -1;  // ratio: the baseline's statistic
  size_t count = 0;      // samples behind `value`
};

struct GateReport {
  std::vector<GateResult> gates;
  std::vector<std::string> notes;  // e.g. how far the machine's floor moved against the baseline
  int Failed() const;
  int Evaluated() const;  // pass + fail
  int ExitCode() const;   // 0 pass; 1 a gate failed or nothing could be gated
};

// "10%" → 0.10, "0.1" → 0.10; a bare number must be a fraction < 1 (so "10" is refused: write
// "10%"). kInvalidArgument otherwise.
sbx::StatusOr<double> ParseTolerance(const std::string& text);

// The shape gate relies on: a sandcheck report whose measurements carry raw samples.
sbx::Status ValidateGateInput(const nlohmann::json& report, const std::string& what);

// The statistic of raw samples: p50, p95, p99 (linear interpolation, as the reports) or mean.
sbx::StatusOr<double> Statistic(const std::vector<double>& samples, const std::string& name);

// Evaluates every gate. `baseline` may be null (absolute gates only). kInvalidArgument for bad
// input (malformed report or baseline, a baseline from another host without allow_other_host).
sbx::StatusOr<GateReport> EvaluateGates(const nlohmann::json& report, const NfrSpec& spec,
                                        const nlohmann::json* baseline, const GateOptions& o);

// JUnit XML (tests/e2e/data/junit.xsd): one suite per kind, one testcase per gate.
std::string RenderGateJunit(const GateReport& g, const nlohmann::json& report);

}  // namespace sandcheck
