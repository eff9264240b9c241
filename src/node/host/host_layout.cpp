#include "node/host/host_layout.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include "common/errno_text.h"
#include "common/text.h"
#include "node/host/allocation_record.h"

namespace gpuslice::node {

HostLayout::HostLayout(std::string root) : root_(std::move(root)) {
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

std::string HostLayout::container_dir(std::string_view id) const {
  return containers_dir() + "/" + std::string(id);
}
std::string HostLayout::state_dir(std::string_view id) const { return container_dir(id) + "/state"; }
std::string HostLayout::state_file(std::string_view id) const { return state_dir(id) + "/" + kStateFileName; }
std::string HostLayout::config_dir(std::string_view id) const { return container_dir(id) + "/config"; }
std::string HostLayout::limits_file(std::string_view id) const { return config_dir(id) + "/limits"; }
std::string HostLayout::allocation_file(std::string_view id) const {
  return container_dir(id) + "/" + kAllocationFileName;
}

std::vector<std::string> HostLayout::list_containers() const {
  std::vector<std::string> ids;
  std::error_code ec;
  std::filesystem::directory_iterator it(containers_dir(), ec);
  if (ec) return ids;
  for (const auto& entry : it) {
    std::error_code type_ec;
    if (!entry.is_directory(type_ec)) continue;
    std::string name = entry.path().filename().string();
    if (valid_container_id(name)) ids.push_back(std::move(name));
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

bool valid_container_id(std::string_view id) { return text::is_plain_name(id); }

Result<bool> make_host_dir(const std::string& path, mode_t mode) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return make_error(path + ": " + ec.message());
  if (::chmod(path.c_str(), mode) != 0) return make_error(path + ": " + fs::errno_text(errno));
  return true;
}

}  // namespace gpuslice::node
