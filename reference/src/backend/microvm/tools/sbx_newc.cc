// sbx-newc: a newc archive of a directory tree, from the command line: the microVM guest
// image's initramfs (fixtures/microvm/build-guest.sh). A thin shell over WriteNewcTree, so that
// the project has one newc writer (microvm_cpio.h says what it writes).
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/microvm/microvm_cpio.h"

namespace {

constexpr const char* kUsage =
    R"(usage: sbx-newc [--root-owned] [--prefix P] [--node NAME:c|b:MAJOR:MINOR:MODE]... TREE OUT

Writes a newc ("070701") archive of the directory tree TREE to OUT, deterministically: entries in
byte order (a directory before its contents), mtime 0, inode numbers in that order; regular
files, directories and symbolic links (devices, FIFOs and sockets in TREE are skipped), hard links
as one inode. OUT is written under a temporary name and renamed into place.

  --root-owned   every entry owned by uid 0, gid 0 (a guest's own files)
  --prefix P     every name under P ("sandbox" -> "sandbox/bin/..."); default: the tree's names
  --node SPEC    a device node written after the tree, e.g. dev/console:c:5:1:0600
  --help         this text

Exit codes: 0 written, 1 the archive could not be written (the reason on stderr), 2 bad usage.
)";

int Usage(const std::string& why) {
  std::fprintf(stderr, "sbx-newc: %s\n\n%s", why.c_str(), kUsage);
  return 2;
}

// NAME:c|b:MAJOR:MINOR:MODE (MODE in octal).
bool ParseNode(const std::string& spec, sbx::microvm::NewcNode* node) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t colon; (colon = spec.find(':', start)) != std::string::npos; start = colon + 1)
    parts.push_back(spec.substr(start, colon - start));
  parts.push_back(spec.substr(start));
  if (parts.size() != 5 || parts[0].empty() || (parts[1] != "c" && parts[1] != "b")) return false;
  char* end = nullptr;
  unsigned long major = std::strtoul(parts[2].c_str(), &end, 10);
  if (parts[2].empty() || *end) return false;
  unsigned long minor = std::strtoul(parts[3].c_str(), &end, 10);
  if (parts[3].empty() || *end) return false;
  unsigned long mode = std::strtoul(parts[4].c_str(), &end, 8);
  if (parts[4].empty() || *end || mode > 07777) return false;
  node->name = parts[0];
  node->mode = static_cast<uint32_t>((parts[1] == "c" ? S_IFCHR : S_IFBLK) | mode);
  node->rdev_major = static_cast<uint32_t>(major);
  node->rdev_minor = static_cast<uint32_t>(minor);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  sbx::microvm::NewcOptions options;
  std::string prefix;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--root-owned") {
      options.root_owned = true;
    } else if (a == "--prefix" || a == "--node") {
      if (i + 1 >= argc) return Usage(a + " needs a value");
      std::string v = argv[++i];
      if (a == "--prefix") {
        prefix = v;
      } else {
        sbx::microvm::NewcNode node;
        if (!ParseNode(v, &node))
          return Usage("--node " + v + ": expected NAME:c|b:MAJOR:MINOR:MODE");
        options.nodes.push_back(node);
      }
    } else if (a.size() > 1 && a[0] == '-') {
      return Usage("unknown option " + a);
    } else {
      positional.push_back(a);
    }
  }
  if (positional.size() != 2) return Usage("expected TREE and OUT");
  sbx::Status s = sbx::microvm::WriteNewcTree(positional[0], prefix, positional[1], options);
  if (!s.ok()) {
    std::fprintf(stderr, "sbx-newc: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
