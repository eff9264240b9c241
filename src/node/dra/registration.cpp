#include "node/dra/registration.h"

#include <grpcpp/grpcpp.h>

#include "common/log.h"
#include "config/text_util.h"
#include "pluginregistration/v1/api.grpc.pb.h"

namespace gpuslice::node::dra {

void RegistrationStatusBoard::set(bool registered, std::string error) {
  std::lock_guard lock(mutex_);
  registered_ = registered;
  error_ = std::move(error);
  heard_ = true;
  if (registered) ++registrations_;
}

PluginRegistration RegistrationStatusBoard::snapshot(const std::string& name) const {
  std::lock_guard lock(mutex_);
  PluginRegistration r;
  r.resource = name;
  r.state = registered_ ? RegistrationState::Registered
                        : (heard_ ? RegistrationState::Registering : RegistrationState::WaitingForKubelet);
  r.registrations = registrations_;
  return r;
}

bool RegistrationStatusBoard::registered() const {
  std::lock_guard lock(mutex_);
  return registered_;
}

namespace {

class Service final : public ::pluginregistration::Registration::Service {
 public:
  Service(RegistrationInfo info, RegistrationStatusBoard& board) : info_(std::move(info)), board_(board) {}

  grpc::Status GetInfo(grpc::ServerContext*, const ::pluginregistration::InfoRequest*,
                       ::pluginregistration::PluginInfo* out) override {
    out->set_type(kPluginType);
    out->set_name(info_.driver);
    out->set_endpoint(info_.endpoint);
    for (const auto& s : kSupportedServices) out->add_supported_versions(s);
    return grpc::Status::OK;
  }

  grpc::Status NotifyRegistrationStatus(grpc::ServerContext*,
                                        const ::pluginregistration::RegistrationStatus* status,
                                        ::pluginregistration::RegistrationStatusResponse*) override {
    const std::string error = config::detail::printable(status->error(), 512);
    if (status->plugin_registered()) {
      GS_LOG(Info, "DRA driver %s registered with the kubelet", info_.driver.c_str());
    } else {
      GS_LOG(Error, "the kubelet refused DRA driver %s: %s", info_.driver.c_str(), error.c_str());
    }
    board_.set(status->plugin_registered(), error);
    return grpc::Status::OK;
  }

 private:
  RegistrationInfo info_;
  RegistrationStatusBoard& board_;
};

}  // namespace

std::unique_ptr<grpc::Service> make_registration_service(RegistrationInfo info,
                                                         RegistrationStatusBoard& board) {
  return std::make_unique<Service>(std::move(info), board);
}

}  // namespace gpuslice::node::dra
