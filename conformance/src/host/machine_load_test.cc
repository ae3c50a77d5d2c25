// How busy the machine was during a run (machine_load.h): the kernel's text parsed, the
// fractions between two samples, and what a sample that could not be read turns into.
#include "host/machine_load.h"

#include <gtest/gtest.h>

namespace sandcheck {
namespace {

TEST(MachineLoad, ParsesTheKernelsText) {
  MachineLoadSample s;
  ASSERT_TRUE(ParseProcStat("cpu  100 5 50 800 20 3 2 10 0 0\ncpu0 1 2 3 4\n", &s));
  EXPECT_EQ(s.total, 990u);  // guest fields are inside user/nice already: not added
  EXPECT_EQ(s.idle, 800u);
  EXPECT_EQ(s.iowait, 20u);
  EXPECT_EQ(s.steal, 10u);
  ASSERT_TRUE(
      ParseCpuPressure("some avg10=1.00 avg60=2.00 avg300=3.00 total=4500000\nfull avg10=0 avg60=0 "
                       "avg300=0 total=9\n",
                       &s));
  EXPECT_EQ(*s.cpu_some_us, 4500000u);
  ASSERT_TRUE(ParseLoadavg("0.44 1.02 1.17 2/93 12345\n", &s));
  EXPECT_DOUBLE_EQ(*s.loadavg1, 0.44);
}

TEST(MachineLoad, TextThatIsNotTheKernelsIsRefusedAndLeavesTheSample) {
  MachineLoadSample s;
  EXPECT_FALSE(ParseProcStat("", &s));
  EXPECT_FALSE(ParseProcStat("intr 1 2 3\n", &s));
  EXPECT_FALSE(ParseProcStat("cpu 1 2\n", &s));
  EXPECT_EQ(s.total, 0u);
  EXPECT_FALSE(ParseCpuPressure("some avg10=1.00\n", &s));
  EXPECT_FALSE(ParseCpuPressure("full avg10=0 total=5\n", &s));
  EXPECT_FALSE(s.cpu_some_us.has_value());
  EXPECT_FALSE(ParseLoadavg("load\n", &s));
  EXPECT_FALSE(ParseLoadavg("-1 0 0\n", &s));
  EXPECT_FALSE(s.loadavg1.has_value());
}

TEST(MachineLoad, FractionsOfAllCpusTimeBetweenTwoSamples) {
  MachineLoadSample a, b;
  a.monotonic_s = 10;
  b.monotonic_s = 20;
  // 2 CPUs x 10 s x 100 Hz = 2000 jiffies: 1000 idle, 100 iowait, 200 steal, 700 working.
  a.total = 5000, a.idle = 3000, a.iowait = 50, a.steal = 0;
  b.total = 7000, b.idle = 4000, b.iowait = 150, b.steal = 200;
  a.cpu_some_us = 1'000'000;
  b.cpu_some_us = 3'500'000;  // 2.5 s of 10 s
  a.loadavg1 = 0.5;
  b.loadavg1 = 3.25;
  auto j = DescribeMachineLoad(a, b);
  EXPECT_DOUBLE_EQ(j["seconds"].get<double>(), 10);
  EXPECT_DOUBLE_EQ(j["cpu_busy"].get<double>(),
                   0.45);  // (2000 - 1000 - 100) / 2000, steal counted busy
  EXPECT_DOUBLE_EQ(j["iowait"].get<double>(), 0.05);
  EXPECT_DOUBLE_EQ(j["steal"].get<double>(), 0.10);
  EXPECT_DOUBLE_EQ(j["cpu_pressure"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(j["loadavg_start"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["loadavg_end"].get<double>(), 3.25);
  EXPECT_EQ(
      MachineLoadLine(j),
      "CPUs 45 % busy (steal 10 %, iowait 5 %), CPU pressure 25 %, load 0.50 → 3.25 over 10.0 s");
}

TEST(MachineLoad, WhatCouldNotBeReadIsNullNeverAGuess) {
  MachineLoadSample a, b;
  a.monotonic_s = 1;
  b.monotonic_s = 2;
  b.total = 100;  // the start was never read
  b.cpu_some_us = 5;
  auto j = DescribeMachineLoad(a, b);
  EXPECT_TRUE(j["cpu_busy"].is_null());
  EXPECT_TRUE(j["steal"].is_null());
  EXPECT_TRUE(j["cpu_pressure"].is_null());
  EXPECT_TRUE(j["loadavg_start"].is_null());
  EXPECT_EQ(MachineLoadLine(j), "");
  // Counters that went backwards (another boot) are no figure either.
  a.total = 500, a.idle = 400;
  b.total = 100, b.idle = 50;
  EXPECT_TRUE(DescribeMachineLoad(a, b)["cpu_busy"].is_null());
  EXPECT_EQ(MachineLoadLine(nlohmann::json()), "");
  EXPECT_EQ(MachineLoadLine(nlohmann::json::array()), "");
}

TEST(MachineLoad, ThisMachineIsReadable) {
  // /proc/stat and /proc/loadavg exist on every Linux; PSI may not (CONFIG_PSI).
  MachineLoadSample a = ReadMachineLoad();
  EXPECT_GT(a.total, 0u);
  EXPECT_TRUE(a.loadavg1.has_value());
  MachineLoadSample b = ReadMachineLoad();
  EXPECT_GE(b.monotonic_s, a.monotonic_s);
}

}  // namespace
}  // namespace sandcheck
