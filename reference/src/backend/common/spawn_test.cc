// SealedBinary (common/spawn.h): the runtime binary that crun and runc would otherwise copy into a
// sealed memfd at every start. The copy must be sealed against every change, executed through
// Spawn's exec_fd, and missing only when the binary is.
#include "backend/common/spawn.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace sbx::backend {
namespace {

TEST(SealedBinary, IsAFullySealedCopyMadeOnce) {
  SealedBinary b("/bin/sh");
  int fd = b.fd();
  ASSERT_GE(fd, 0);
  EXPECT_EQ(b.fd(), fd);  // one copy per runtime
  // Exactly the seals crun's and runc's is_self_cloned() accept: nothing can change it.
  EXPECT_EQ(fcntl(fd, F_GET_SEALS), F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE);
  EXPECT_EQ(pwrite(fd, "x", 1, 0), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(ftruncate(fd, 0), -1);
  struct stat copy {
  }, original{};
  ASSERT_EQ(fstat(fd, &copy), 0);
  ASSERT_EQ(stat("/bin/sh", &original), 0);
  EXPECT_EQ(copy.st_size, original.st_size);
}

TEST(SealedBinary, SpawnExecutesTheCopyUnderTheNameGiven) {
  SealedBinary b("/bin/sh");
  SpawnPlan plan{.argv = {"/bin/sh", "-c", "readlink /proc/$$/exe; echo \"$0\""}};
  plan.exec_fd = b.fd();
  auto out = RunCommand(plan, 10);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_TRUE(out->ok()) << out->Describe();
  EXPECT_NE(out->out.find("/memfd:sbx-sealed-runtime"), std::string::npos) << out->out;
  EXPECT_NE(out->out.find("\n/bin/sh\n"), std::string::npos) << out->out;
  // Without it, the path itself.
  plan.exec_fd = -1;
  out = RunCommand(plan, 10);
  ASSERT_TRUE(out.ok() && out->ok());
  EXPECT_EQ(out->out.find("memfd:"), std::string::npos) << out->out;
}

TEST(SealedBinary, AMissingBinaryHasNoCopy) {
  SealedBinary b("/nonexistent/crun");
  EXPECT_EQ(b.fd(), -1);
  EXPECT_EQ(b.fd(), -1);
}

}  // namespace
}  // namespace sbx::backend
