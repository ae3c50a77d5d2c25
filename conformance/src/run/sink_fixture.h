// The egress sink (EGR-1, issue 32): sockets the harness itself holds on its own host's
// loopback that record every connection and datagram that reaches them. A sandbox's probe
// tries each of them (sbx-probe --connect, nc, nslookup NAME SERVER); "denied" means the sink
// recorded nothing while the task ran, never that the probe printed an error: a runtime can make
// up its output, it cannot take back a connection the harness accepted.
//
// What it listens on, each a way out that is not HTTP on port 80 or the sandbox's own resolver:
//   127.0.0.1:P      tcp and udp (one ephemeral port for both)
//   [::1]:Q          tcp and udp (IPv6; left out, and said so, where the host has no ::1)
//   127.83.84.N:443  tcp: a TLS ClientHello with an SNI no policy lists
//   127.83.84.N:53   udp: a query to an explicit resolver (`nslookup NAME 127.83.84.N`)
// N is the first of 1..64 where both well-known ports are free; where none is, both take
// ephemeral ports there and describe() says so. A sandbox whose network is its own reaches
// none of these (its 127.0.0.0/8 and ::1 are its own loopback); a sandbox that shares the host's
// network, or whose traffic beyond tcp/80 goes out unfiltered to the host, does.
//
// Start() proves the sink hears (the positive control): the harness connects to and sends to
// every endpoint itself and finds each in the record before it hands out the addresses. A thread
// then takes in connections and datagrams as they arrive: a tcp connection is recorded, then
// gets the banner "sandcheck-sink\n", then is closed, so a probe that reads the banner (through
// a TLS passthrough) knows it is recorded. LogSince() also takes in what the kernel still holds
// (the accept queues and the datagram buffers), so whatever reached the sink before the call
// returned is there.
//
// Thread-safety: one owner; LogCount/LogSince are safe from any thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sbx/status.h"

namespace sandcheck {

class SinkFixture {
 public:
  // kUnsupported when no loopback socket can be bound or the positive control fails.
  static sbx::StatusOr<SinkFixture> Start();

  // sbx-probe's arguments: "--connect KIND:ADDR:PORT[:NAME] ..." for every endpoint.
  const std::string& probe_args() const { return probe_args_; }
  // "127.0.0.1:P": the tcp endpoint, as the service behind a scenario's name (`"services":
  // {NAME: "sink"}`: a TLS passthrough that reaches it is recorded like any connection).
  std::string tcp_address() const;
  // "127.0.0.1 P" (for `nc`), and the explicit resolver ("127.83.84.N" or "127.83.84.N:PORT").
  const std::string& nc_target() const { return nc_target_; }
  const std::string& resolver() const { return resolver_; }
  // The name the dns and tls probes ask for (no policy lists it).
  static constexpr const char* kProbeName = "sandcheck-sink.example.net";
  // The endpoints, what the positive control saw, and what is missing (for the report).
  nlohmann::json describe() const;

  // How many connections and datagrams have been recorded (after the control's), a count that
  // only grows; LogSince(n) the records after the first n, one line each:
  // "tcp 127.0.0.1:P from 127.0.0.1:E" / "udp 127.83.84.1:53 from 127.0.0.1:E, 29 bytes".
  size_t LogCount() const;
  std::vector<std::string> LogSince(size_t since) const;

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::string probe_args_, nc_target_, resolver_;
};

}  // namespace sandcheck
