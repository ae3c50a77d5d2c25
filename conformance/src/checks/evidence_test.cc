// Reading busybox's outputs: the exact bytes busybox 1.35 prints (as in the demo's log).
#include "checks/evidence.h"

#include <gtest/gtest.h>

#include "common/stats.h"

namespace sandcheck {
namespace {

TEST(Evidence, NxdomainAndBadAddressFromTheDemo) {
  auto e = ClassifyNetwork("** server can't find example.com: NXDOMAIN\n\nwget_exit=1\n",
                           "wget: bad address 'example.com'\n");
  EXPECT_EQ(e.lookup, LookupOutcome::kNxdomain);
  EXPECT_EQ(e.wget, WgetOutcome::kBadAddress);
  EXPECT_EQ(e.wget_exit, 1);
  EXPECT_EQ(e.Summary(), "NXDOMAIN");
}

TEST(Evidence, GatewayRefusal) {
  auto e =
      ClassifyNetwork("wget_exit=1\n", "wget: server returned error: HTTP/1.1 403 Forbidden\n");
  EXPECT_EQ(e.wget, WgetOutcome::kHttp403);
  EXPECT_EQ(e.http_status, 403);
  EXPECT_EQ(e.Summary(), "403 from the gateway");
  auto other =
      ClassifyNetwork("wget_exit=1\n", "wget: server returned error: HTTP/1.1 502 Bad Gateway\n");
  EXPECT_EQ(other.wget, WgetOutcome::kHttpError);
  EXPECT_EQ(other.http_status, 502);
}

TEST(Evidence, TellsUnreachableRefusedTimeoutAndSuccessApart) {
  EXPECT_EQ(
      ClassifyNetwork("wget_exit=1\n",
                      "wget: can't connect to remote host (203.0.113.7): Network is unreachable\n")
          .wget,
      WgetOutcome::kUnreachable);
  EXPECT_EQ(ClassifyNetwork("wget_exit=1\n",
                            "wget: can't connect to remote host (203.0.113.7): No route to host\n")
                .wget,
            WgetOutcome::kUnreachable);
  EXPECT_EQ(ClassifyNetwork("wget_exit=1\n",
                            "wget: can't connect to remote host (10.0.0.1): Connection refused\n")
                .wget,
            WgetOutcome::kRefused);
  EXPECT_EQ(ClassifyNetwork("wget_exit=1\n", "wget: download timed out\n").wget,
            WgetOutcome::kTimeout);
  EXPECT_EQ(ClassifyNetwork("<html></html>\nwget_exit=0\n", "").wget, WgetOutcome::kOk);
  EXPECT_EQ(ClassifyNetwork("wget_exit=4\n", "").wget, WgetOutcome::kOtherFailure);
}

TEST(Evidence, LookupOutcomes) {
  std::string resolved =
      "Server:\t\t10.200.0.1\nAddress:\t10.200.0.1:53\n\nNon-authoritative "
      "answer:\nName:\texample.com\n"
      "Address: 93.184.216.34\n";
  EXPECT_EQ(ClassifyNetwork(resolved, "").lookup, LookupOutcome::kResolved);
  // The server's own "Address:" line before "Name:" is not an answer.
  std::string nx =
      "Server:\t\t10.200.0.1\nAddress:\t10.200.0.1:53\n\n** server can't find x.y: NXDOMAIN\n";
  EXPECT_EQ(ClassifyNetwork(nx, "").lookup, LookupOutcome::kNxdomain);
  EXPECT_EQ(ClassifyNetwork(";; connection timed out; no servers could be reached\n", "").lookup,
            LookupOutcome::kNoServer);
  EXPECT_EQ(ClassifyNetwork("** server can't find x.y: SERVFAIL\n", "").lookup,
            LookupOutcome::kOtherError);
}

TEST(Evidence, CpuToolAndFileCount) {
  auto c = ParseCpuTool("wall_seconds 2.380 cpu_seconds 2.001 threads 1\n");
  ASSERT_TRUE(c);
  EXPECT_DOUBLE_EQ(c->wall_seconds, 2.38);
  EXPECT_DOUBLE_EQ(c->cpu_seconds, 2.001);
  EXPECT_EQ(c->threads, 1);
  EXPECT_FALSE(ParseCpuTool("sh: sbx-cpu: not found\n"));
  EXPECT_EQ(ParseFileCount("0\n"), 0);
  EXPECT_EQ(ParseFileCount("  12\n"), 12);
  EXPECT_FALSE(ParseFileCount("0\n1\n"));
  EXPECT_FALSE(ParseFileCount("find: /work: No such file or directory\n0\n"));
  EXPECT_FALSE(ParseFileCount(""));
}

TEST(Stats, PercentilesInterpolateLikeNumpy) {
  std::vector<double> v = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 5.5);
  EXPECT_DOUBLE_EQ(Percentile(v, 95), 9.55);
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 10);
  EXPECT_DOUBLE_EQ(Percentile({7}, 99), 7);
  Stats s = ComputeStats({3, 1, 2});
  EXPECT_EQ(s.count, 3u);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 3);
  EXPECT_DOUBLE_EQ(s.mean, 2);
  EXPECT_TRUE(StatsJson({})["p50"].is_null());
}

}  // namespace
}  // namespace sandcheck
