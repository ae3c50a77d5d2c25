#include "common/image.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <limits.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>

#include "common/fd.h"
#include "common/fs_util.h"

namespace sandcheck::adapter {

sbx::StatusOr<std::string> ImageStoreDir() {
  if (const char* env = std::getenv("SANDCHECK_IMAGE_STORE"); env && *env) return std::string(env);
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return sbx::ErrnoStatus("readlink /proc/self/exe");
  std::string exe(buf, static_cast<size_t>(n));
  auto slash = exe.rfind('/');
  return exe.substr(0, slash) + "/../images";
}

sbx::StatusOr<ImageRef> ResolveTemplate(const std::string& template_name) {
  if (template_name.empty() || template_name.size() > 64 || template_name[0] == '.') {
    return sbx::InvalidArgument(fmt::format("bad template name \"{}\"", template_name));
  }
  for (char c : template_name) {
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      return sbx::InvalidArgument(fmt::format("bad template name \"{}\"", template_name));
    }
  }
  ASSIGN_OR_RETURN(std::string store, ImageStoreDir());
  auto ref = ReadFile(store + "/refs/" + template_name);
  if (!ref.ok()) {
    return sbx::Status(sbx::Code::kNotFound,
                       fmt::format("template \"{}\": no image ref in {}/refs (build the sbx_image "
                                   "target, or set SANDCHECK_IMAGE_STORE): {}",
                                   template_name, store, ref.status().message()));
  }
  std::string digest = *ref;
  while (!digest.empty() && std::isspace(static_cast<unsigned char>(digest.back())))
    digest.pop_back();
  constexpr std::string_view kPrefix = "sha256:";
  std::string hex = digest.substr(std::min(digest.size(), kPrefix.size()));
  bool ok = digest.rfind(kPrefix, 0) == 0 && hex.size() == 64;
  for (char c : hex)
    ok = ok && std::isxdigit(static_cast<unsigned char>(c)) &&
         !std::isupper(static_cast<unsigned char>(c));
  if (!ok) return sbx::InvalidArgument(fmt::format("bad image ref \"{}\"", digest));
  return ImageRef{digest, store + "/" + hex + ".tar"};
}

sbx::Status UnpackVerified(Supervisor& sup, const ImageRef& image, const std::string& dest) {
  // One open file for both steps: what is verified is what is unpacked.
  UniqueFd tar(open(image.tar_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!tar.valid()) return sbx::ErrnoStatus(fmt::format("open {}", image.tar_path));
  RunOptions opts;
  opts.stdin_fd = tar.get();
  std::vector<std::string> sum_argv = {"sha256sum", "-b", "-"};
  ASSIGN_OR_RETURN(RunResult sum, Run(sup, sum_argv, opts));
  if (!sum.success()) return sbx::Internal(DescribeFailure(sum_argv, sum));
  std::string got = "sha256:" + sum.out.substr(0, sum.out.find(' '));
  if (got != image.digest) {
    return sbx::Status(sbx::Code::kFailedPrecondition,
                       fmt::format("image {} has digest {}, expected {} (IMG-1)", image.tar_path,
                                   got, image.digest));
  }
  if (lseek(tar.get(), 0, SEEK_SET) != 0) return sbx::ErrnoStatus("lseek image");
  std::vector<std::string> tar_argv = {
      "tar", "-x", "--numeric-owner", "--same-permissions", "-f", "-", "-C", dest};
  ASSIGN_OR_RETURN(RunResult untar, Run(sup, tar_argv, opts));
  if (!untar.success()) return sbx::Internal(DescribeFailure(tar_argv, untar));
  return sbx::Status::Ok();
}

}  // namespace sandcheck::adapter
