#include "node/kubelet/podresources.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <string_view>

namespace gpuslice::node {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

// The answer is walked on the wire, not decoded into messages: a 16 MiB answer of tiny pods decodes
// into millions of objects (hundreds of MB), while only our resources' devices are kept, and those
// are bounded too.
constexpr std::size_t kMaxListedEntries = 1 << 16;    // containers x resources of ours
constexpr std::size_t kMaxListedDeviceIds = 1 << 21;  // ids of ours, all containers together
constexpr std::size_t kMaxNameBytes = 1024;           // pod, namespace, container, resource names
constexpr int kMaxTotalBytes = 64 << 20;              // the stream's own limit, above the gRPC one

// ListPodResourcesResponse{1: repeated PodResources}; PodResources{1: name, 2: namespace,
// 3: repeated ContainerResources}; ContainerResources{1: name, 2: repeated ContainerDevices};
// ContainerDevices{1: resource_name, 2: repeated device_ids}. Other fields are skipped.
class Walker {
 public:
  Walker(const std::string& prefix, std::vector<ListedDevices>& out) : prefix_(prefix), out_(out) {}

  Result<bool> response(CodedInputStream& in) {
    while (std::uint32_t tag = in.ReadTag()) {
      if (tag == tag_of(1)) {
        if (!nested(in, [&](CodedInputStream& pod) { return this->pod(pod); })) return fail();
      } else if (!WireFormatLite::SkipField(&in, tag)) {
        return fail();
      }
    }
    if (!in.ConsumedEntireMessage()) return fail();
    if (!error_.empty()) return make_error(error_);
    return true;
  }

 private:
  static constexpr std::uint32_t tag_of(int field) {
    return static_cast<std::uint32_t>(field << 3 | WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  }
  Result<bool> fail() {
    return make_error(error_.empty() ? std::string("malformed PodResources answer") : error_);
  }

  template <typename Body>
  static bool nested(CodedInputStream& in, Body body) {
    std::uint32_t length = 0;
    if (!in.ReadVarint32(&length)) return false;
    const int left = in.BytesUntilLimit();  // -1: no limit
    if (length > static_cast<std::uint32_t>(kMaxTotalBytes) || (left >= 0 && static_cast<int>(length) > left))
      return false;
    auto limit = in.PushLimit(static_cast<int>(length));
    const bool ok = body(in) && in.BytesUntilLimit() == 0;
    in.PopLimit(limit);
    return ok;
  }
  // A string field; kept only up to `max` bytes (a longer one is an error).
  bool text(CodedInputStream& in, std::string& out, std::size_t max) {
    std::uint32_t length = 0;
    if (!in.ReadVarint32(&length)) return false;
    if (length > max) {
      error_ = "PodResources answer: a name of " + std::to_string(length) + " bytes";
      return false;
    }
    return in.ReadString(&out, static_cast<int>(length));
  }
  bool skip_text(CodedInputStream& in) {
    std::uint32_t length = 0;
    return in.ReadVarint32(&length) && in.Skip(static_cast<int>(length));
  }

  bool pod(CodedInputStream& in) {
    PodContainer owner;
    const std::size_t first = out_.size();
    while (std::uint32_t tag = in.ReadTag()) {
      if (tag == tag_of(1)) {
        if (!text(in, owner.pod, kMaxNameBytes)) return false;
      } else if (tag == tag_of(2)) {
        if (!text(in, owner.namespace_name, kMaxNameBytes)) return false;
      } else if (tag == tag_of(3)) {
        if (!nested(in, [&](CodedInputStream& c) { return container(c); })) return false;
      } else if (!WireFormatLite::SkipField(&in, tag)) {
        return false;
      }
    }
    // Fields may come in any order: the pod's names apply to every entry of it.
    for (std::size_t i = first; i < out_.size(); ++i) {
      out_[i].owner.pod = owner.pod;
      out_[i].owner.namespace_name = owner.namespace_name;
    }
    return true;
  }

  bool container(CodedInputStream& in) {
    std::string name;
    const std::size_t first = out_.size();
    while (std::uint32_t tag = in.ReadTag()) {
      if (tag == tag_of(1)) {
        if (!text(in, name, kMaxNameBytes)) return false;
      } else if (tag == tag_of(2)) {
        if (!nested(in, [&](CodedInputStream& d) { return devices(d); })) return false;
      } else if (!WireFormatLite::SkipField(&in, tag)) {
        return false;
      }
    }
    for (std::size_t i = first; i < out_.size(); ++i) out_[i].owner.container = name;
    return true;
  }

  bool devices(CodedInputStream& in) {
    // The resource name may follow the ids: ids are kept until the name says whether they are ours.
    std::string resource;
    std::vector<std::string> ids;
    bool resource_seen = false;
    while (std::uint32_t tag = in.ReadTag()) {
      if (tag == tag_of(1)) {
        if (!text(in, resource, kMaxNameBytes)) return false;
        resource_seen = true;
      } else if (tag == tag_of(2)) {
        if (resource_seen && !ours(resource)) {
          if (!skip_text(in)) return false;
          continue;
        }
        if (ids_ >= kMaxListedDeviceIds) {
          error_ = "PodResources answer lists more than " + std::to_string(kMaxListedDeviceIds) +
                   " device ids of " + prefix_ + " resources";
          return false;
        }
        ++ids_;
        ids.emplace_back();
        if (!text(in, ids.back(), kMaxNameBytes)) return false;
      } else if (!WireFormatLite::SkipField(&in, tag)) {
        return false;
      }
    }
    if (!ours(resource)) {
      ids_ -= ids.size();
      return true;
    }
    if (out_.size() >= kMaxListedEntries) {
      error_ = "PodResources answer lists more than " + std::to_string(kMaxListedEntries) + " containers' " +
               prefix_ + " devices";
      return false;
    }
    ListedDevices listed;
    listed.resource = std::move(resource);
    listed.device_ids = std::move(ids);
    out_.push_back(std::move(listed));
    return true;
  }

  bool ours(std::string_view resource) const { return resource.substr(0, prefix_.size()) == prefix_; }

  const std::string& prefix_;
  std::vector<ListedDevices>& out_;
  std::size_t ids_ = 0;
  std::string error_;
};

}  // namespace

Result<std::vector<ListedDevices>> parse_list_response(std::string_view bytes,
                                                       const std::string& resource_prefix) {
  CodedInputStream in(reinterpret_cast<const std::uint8_t*>(bytes.data()), static_cast<int>(bytes.size()));
  in.SetTotalBytesLimit(kMaxTotalBytes);
  std::vector<ListedDevices> out;
  Walker walker(resource_prefix, out);
  if (auto r = walker.response(in); !r) return make_error(r.error());
  return out;
}

struct PodResourcesClient::Impl {
  PodResourcesOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::GenericStub> stub;
  std::uint64_t instance = 0;
};

PodResourcesClient::PodResourcesClient(PodResourcesOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(impl_->options.max_message_bytes));
  // The kubelet restarts now and then: try again at the next scan rather than after a long backoff.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  impl_->channel =
      grpc::CreateCustomChannel("unix://" + impl_->options.socket, grpc::InsecureChannelCredentials(), args);
  impl_->stub = std::make_unique<grpc::GenericStub>(impl_->channel);
}

PodResourcesClient::~PodResourcesClient() = default;

std::uint64_t PodResourcesClient::kubelet_instance() const { return impl_->instance; }

Result<std::vector<ListedDevices>> PodResourcesClient::list() {
  const PodResourcesOptions& o = impl_->options;
  struct stat st {};
  if (::stat(o.socket.c_str(), &st) != 0) return make_error(o.socket + ": no kubelet PodResources socket");
  // A kubelet that restarts makes its socket anew.
  impl_->instance = static_cast<std::uint64_t>(st.st_ino);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + o.timeout);
  grpc::CompletionQueue queue;
  grpc::ByteBuffer request;  // ListPodResourcesRequest has no fields: zero bytes
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  auto call = impl_->stub->PrepareUnaryCall(&context, "/v1.PodResourcesLister/List", request, &queue);
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  if (!queue.Next(&tag, &ok) || !ok) status = grpc::Status(grpc::StatusCode::UNKNOWN, "no answer");
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  if (!status.ok()) return make_error("PodResources List on " + o.socket + ": " + status.error_message());
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok())
    return make_error("PodResources List on " + o.socket + ": unreadable answer");
  std::string bytes;
  bytes.reserve(response.Length());
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  slices.clear();
  response.Clear();
  auto listed = parse_list_response(bytes, o.resource_prefix);
  if (!listed) return make_error("PodResources List on " + o.socket + ": " + listed.error());
  return listed;
}

}  // namespace gpuslice::node
