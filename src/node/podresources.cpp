#include "node/podresources.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include "podresources/v1/api.grpc.pb.h"

namespace gpuslice::node {

struct PodResourcesClient::Impl {
  PodResourcesOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<::v1::PodResourcesLister::Stub> stub;
};

PodResourcesClient::PodResourcesClient(PodResourcesOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(impl_->options.max_message_bytes));
  // The kubelet restarts now and then: try again at the next scan rather than after a long backoff.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  impl_->channel =
      grpc::CreateCustomChannel("unix://" + impl_->options.socket, grpc::InsecureChannelCredentials(), args);
  impl_->stub = ::v1::PodResourcesLister::NewStub(impl_->channel);
}

PodResourcesClient::~PodResourcesClient() = default;

Result<std::vector<ListedDevices>> PodResourcesClient::list() {
  const PodResourcesOptions& o = impl_->options;
  struct stat st {};
  if (::stat(o.socket.c_str(), &st) != 0) return make_error(o.socket + ": no kubelet PodResources socket");
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + o.timeout);
  ::v1::ListPodResourcesRequest request;
  ::v1::ListPodResourcesResponse response;
  grpc::Status status = impl_->stub->List(&context, request, &response);
  if (!status.ok()) return make_error("PodResources List on " + o.socket + ": " + status.error_message());
  std::vector<ListedDevices> out;
  for (const auto& pod : response.pod_resources()) {
    for (const auto& container : pod.containers()) {
      for (const auto& devices : container.devices()) {
        if (devices.resource_name().compare(0, o.resource_prefix.size(), o.resource_prefix) != 0) continue;
        ListedDevices listed;
        listed.resource = devices.resource_name();
        listed.device_ids.assign(devices.device_ids().begin(), devices.device_ids().end());
        listed.owner = {pod.namespace_(), pod.name(), container.name()};
        out.push_back(std::move(listed));
      }
    }
  }
  return out;
}

}  // namespace gpuslice::node
