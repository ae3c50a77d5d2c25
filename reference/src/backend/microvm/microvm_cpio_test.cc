// newc archives of a directory tree (microvm_cpio.h): written, parsed back here, compared.
#include "backend/microvm/microvm_cpio.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace sbx::microvm {
namespace {

struct CpioEntry {
  uint32_t ino = 0, mode = 0, uid = 0, gid = 0, nlink = 0, mtime = 0, rmajor = 0, rminor = 0;
  std::string name, data;
};

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const std::string& data, mode_t mode) {
  std::ofstream(path, std::ios::binary) << data;
  chmod(path.c_str(), mode);
}

// A strict newc reader: every archive in `b` (concatenated), each ending with TRAILER!!!.
std::vector<std::vector<CpioEntry>> Parse(const std::string& b, std::string* err) {
  std::vector<std::vector<CpioEntry>> archives(1);
  size_t off = 0;
  auto hex = [&](size_t at) {
    return static_cast<uint32_t>(std::stoul(b.substr(at, 8), nullptr, 16));
  };
  while (off < b.size()) {
    if (off % 4 != 0) {
      *err = "entry at an unaligned offset " + std::to_string(off);
      return {};
    }
    if (b.size() - off < 110 || b.compare(off, 6, "070701") != 0) {
      *err = "bad header at " + std::to_string(off);
      return {};
    }
    CpioEntry e;
    e.ino = hex(off + 6);
    e.mode = hex(off + 14);
    e.uid = hex(off + 22);
    e.gid = hex(off + 30);
    e.nlink = hex(off + 38);
    e.mtime = hex(off + 46);
    e.rmajor = hex(off + 78);
    e.rminor = hex(off + 86);
    uint32_t filesize = hex(off + 54);
    uint32_t namesize = hex(off + 94);
    e.name = b.substr(off + 110, namesize - 1);
    if (b[off + 110 + namesize - 1] != '\0') {
      *err = "name not NUL-terminated: " + e.name;
      return {};
    }
    off += 110 + namesize;
    off = (off + 3) & ~size_t{3};
    e.data = b.substr(off, filesize);
    off += filesize;
    off = (off + 3) & ~size_t{3};
    if (e.name == "TRAILER!!!") {
      archives.emplace_back();
      continue;
    }
    archives.back().push_back(std::move(e));
  }
  if (off != b.size()) *err = "archive runs past the end";
  if (!archives.back().empty()) *err = "last archive has no TRAILER!!!";
  archives.pop_back();
  return archives;
}

class CpioTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char d[] = "/tmp/sbx-cpiotest-XXXXXX";
    ASSERT_NE(mkdtemp(d), nullptr);
    dir_ = d;
    tree_ = dir_ + "/tree";
    namespace fs = std::filesystem;
    fs::create_directories(tree_ + "/bin");
    fs::create_directories(tree_ + "/etc/empty");
    fs::create_directories(tree_ + "/dev");
    WriteFile(tree_ + "/bin/busybox", std::string(5001, 'B'), 0755);
    for (const char* n : {"/bin/sh", "/bin/ls", "/bin/cat"})
      ASSERT_EQ(link((tree_ + "/bin/busybox").c_str(), (tree_ + n).c_str()), 0);
    WriteFile(tree_ + "/etc/passwd", "sandbox:x:1000:1000::/home/sandbox:/bin/sh\n", 0644);
    WriteFile(tree_ + "/etc/secret", "s", 0600);
    WriteFile(tree_ + "/etc/empty-file", "", 0644);
    ASSERT_EQ(symlink("busybox", (tree_ + "/bin/wget").c_str()), 0);
    ASSERT_EQ(symlink("/proc/self/fd", (tree_ + "/dev/fd").c_str()), 0);
    ASSERT_EQ(mkfifo((tree_ + "/dev/fifo").c_str(), 0644), 0);
    // A character device, when we may make one (root): skipped in the archive.
    can_mknod_ = mknod((tree_ + "/dev/null").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0;
    chmod((tree_ + "/etc/empty").c_str(), 0700);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_, tree_;
  bool can_mknod_ = false;
};

TEST_F(CpioTest, TreeUnderAPrefixRoundTrips) {
  std::string out = dir_ + "/a.cpio";
  Status s = WriteNewcTree(tree_, "sandbox", out);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::string bytes = ReadFile(out);
  std::string err;
  auto archives = Parse(bytes, &err);
  ASSERT_TRUE(err.empty()) << err;
  ASSERT_EQ(archives.size(), 1u);
  std::map<std::string, CpioEntry> by_name;
  std::vector<std::string> order;
  for (auto& e : archives[0]) {
    order.push_back(e.name);
    EXPECT_EQ(e.mtime, 0u) << e.name;
    by_name[e.name] = e;
  }
  std::vector<std::string> want = {"sandbox",
                                   "sandbox/bin",
                                   "sandbox/bin/busybox",
                                   "sandbox/bin/cat",
                                   "sandbox/bin/ls",
                                   "sandbox/bin/sh",
                                   "sandbox/bin/wget",
                                   "sandbox/dev",
                                   "sandbox/dev/fd",
                                   "sandbox/etc",
                                   "sandbox/etc/empty",
                                   "sandbox/etc/empty-file",
                                   "sandbox/etc/passwd",
                                   "sandbox/etc/secret"};
  EXPECT_EQ(order, want) << "sorted, directories first, fifo and device skipped";

  EXPECT_EQ(by_name["sandbox"].mode,
            static_cast<uint32_t>(S_IFDIR | 0755) & by_name["sandbox"].mode);
  EXPECT_TRUE(S_ISDIR(by_name["sandbox/etc/empty"].mode));
  EXPECT_EQ(by_name["sandbox/etc/empty"].mode & 07777, 0700u);
  EXPECT_EQ(by_name["sandbox/etc/secret"].mode, static_cast<uint32_t>(S_IFREG | 0600));
  EXPECT_EQ(by_name["sandbox/etc/secret"].data, "s");
  EXPECT_EQ(by_name["sandbox/etc/passwd"].data, "sandbox:x:1000:1000::/home/sandbox:/bin/sh\n");
  EXPECT_EQ(by_name["sandbox/etc/empty-file"].data, "");
  EXPECT_EQ(by_name["sandbox/bin/wget"].mode & S_IFMT, static_cast<uint32_t>(S_IFLNK));
  EXPECT_EQ(by_name["sandbox/bin/wget"].data, "busybox");
  EXPECT_EQ(by_name["sandbox/dev/fd"].data, "/proc/self/fd");
  EXPECT_EQ(by_name["sandbox/etc/passwd"].uid, getuid());
  EXPECT_EQ(by_name["sandbox/etc/passwd"].gid, getgid());

  // The four names of busybox: one inode, nlink 4, the data once, with the last name.
  std::vector<std::string> names = {"sandbox/bin/busybox", "sandbox/bin/cat", "sandbox/bin/ls",
                                    "sandbox/bin/sh"};
  uint32_t ino = by_name[names[0]].ino;
  EXPECT_NE(ino, 0u);
  for (const auto& n : names) {
    EXPECT_EQ(by_name[n].ino, ino) << n;
    EXPECT_EQ(by_name[n].nlink, 4u) << n;
    EXPECT_EQ(by_name[n].mode, static_cast<uint32_t>(S_IFREG | 0755)) << n;
  }
  EXPECT_EQ(by_name["sandbox/bin/sh"].data, std::string(5001, 'B'));
  for (size_t i = 0; i + 1 < names.size(); i++) EXPECT_EQ(by_name[names[i]].data, "") << names[i];
  // Other inode numbers are distinct.
  std::map<uint32_t, int> inos;
  for (auto& e : archives[0]) inos[e.ino]++;
  EXPECT_EQ(inos[ino], 4);
  EXPECT_EQ(inos.size(), archives[0].size() - 3);
  if (!can_mknod_) std::printf("(no character device in the tree: mknod not permitted)\n");

  // The same tree again gives the same bytes, also after its times changed.
  timeval tv[2] = {{12345, 0}, {12345, 0}};
  utimes((tree_ + "/etc/passwd").c_str(), tv);
  utimes((tree_ + "/bin").c_str(), tv);
  std::string out2 = dir_ + "/b.cpio";
  ASSERT_TRUE(WriteNewcTree(tree_, "sandbox/", out2).ok());
  EXPECT_EQ(ReadFile(out2), bytes);
  // No temporary files left next to the output.
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir_)) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 2);
}

TEST_F(CpioTest, EmptyPrefixUsesTheTreesOwnNames) {
  std::string out = dir_ + "/a.cpio";
  ASSERT_TRUE(WriteNewcTree(tree_, "", out).ok());
  std::string err;
  auto archives = Parse(ReadFile(out), &err);
  ASSERT_TRUE(err.empty()) << err;
  ASSERT_EQ(archives.size(), 1u);
  EXPECT_EQ(archives[0].front().name, "bin");
}

TEST_F(CpioTest, ConcatenatedArchivesArePaddedTo4Bytes) {
  std::string a = dir_ + "/a.cpio", b = dir_ + "/b.cpio", odd = dir_ + "/odd",
              all = dir_ + "/all.cpio";
  ASSERT_TRUE(WriteNewcTree(tree_ + "/etc", "x", a).ok());
  ASSERT_TRUE(WriteNewcTree(tree_ + "/bin", "y", b).ok());
  WriteFile(odd, "abc", 0644);
  Status s = ConcatFiles({odd, a, b}, all);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::string bytes = ReadFile(all);
  EXPECT_EQ(bytes.size(), 4 + ReadFile(a).size() + ReadFile(b).size());
  EXPECT_EQ(bytes.substr(0, 4), std::string("abc\0", 4));
  std::string err;
  auto archives = Parse(bytes.substr(4), &err);
  ASSERT_TRUE(err.empty()) << err;
  ASSERT_EQ(archives.size(), 2u);
  EXPECT_EQ(archives[0][0].name, "x");
  EXPECT_EQ(archives[1][0].name, "y");

  EXPECT_FALSE(ConcatFiles({dir_ + "/missing"}, all).ok());
  EXPECT_FALSE(WriteNewcTree(dir_ + "/missing", "x", a).ok());
  EXPECT_EQ(ReadFile(all), bytes) << "a failed concat leaves the old output alone";
}

TEST_F(CpioTest, RootOwnedAndNodesAfterTheTree) {
  // The guest image's initramfs (sbx-newc --root-owned --node dev/console:c:5:1:0600): every
  // entry owned by root whoever owns the tree, and a device node the tree could not hold.
  ASSERT_EQ(lchown((tree_ + "/etc/passwd").c_str(), 1000, 1000), 0);
  std::string out = dir_ + "/g.cpio";
  NewcOptions o{.root_owned = true, .nodes = {{"dev/console", S_IFCHR | 0600, 5, 1}}};
  Status s = WriteNewcTree(tree_, "", out, o);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::string err;
  auto archives = Parse(ReadFile(out), &err);
  ASSERT_TRUE(err.empty()) << err;
  ASSERT_EQ(archives.size(), 1u);
  uint32_t max_ino = 0;
  for (const auto& e : archives[0]) {
    EXPECT_EQ(e.uid, 0u) << e.name;
    EXPECT_EQ(e.gid, 0u) << e.name;
    if (&e != &archives[0].back()) max_ino = std::max(max_ino, e.ino);
  }
  const CpioEntry& console = archives[0].back();
  EXPECT_EQ(console.name, "dev/console");
  EXPECT_EQ(console.mode, static_cast<uint32_t>(S_IFCHR | 0600));
  EXPECT_EQ(console.rmajor, 5u);
  EXPECT_EQ(console.rminor, 1u);
  EXPECT_EQ(console.ino, max_ino + 1) << "a node takes the next inode number";

  // Without root_owned the owner is kept.
  ASSERT_TRUE(WriteNewcTree(tree_, "", out).ok());
  bool kept = false;
  auto plain = Parse(ReadFile(out), &err);
  ASSERT_EQ(plain.size(), 1u) << err;
  for (const auto& e : plain[0])
    kept = kept || (e.name == "etc/passwd" && e.uid == 1000 && e.gid == 1000);
  EXPECT_TRUE(kept);

  // A node that is not a device, or has an absolute name, is refused and writes nothing.
  for (const NewcNode& bad :
       {NewcNode{"dev/x", S_IFREG | 0600}, NewcNode{"/dev/console", S_IFCHR | 0600, 5, 1},
        NewcNode{"", S_IFCHR | 0600}}) {
    Status b = WriteNewcTree(tree_, "", dir_ + "/bad.cpio", NewcOptions{.nodes = {bad}});
    EXPECT_EQ(b.code(), Code::kInvalidArgument) << bad.name;
    EXPECT_FALSE(std::filesystem::exists(dir_ + "/bad.cpio"));
  }
}

}  // namespace
}  // namespace sbx::microvm
