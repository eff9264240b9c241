// NVML hooks: utilisation on a device of the slice is the container's own share.
//
// - Per-process samples (nvmlDeviceGetProcessUtilization, nvmlDeviceGetProcessesUtilizationInfo)
//   keep only the container's processes, under the caller's size protocol.
// - nvmlDeviceGetUtilizationRates: gpu = the sum over the container's processes of their SM
//   utilisation in the driver's samples of the last second (one process's samples averaged),
//   clamped to 100; memory likewise from the memory-controller samples. "The last second" is
//   NVML's own filter (samples newer than now - 1 s on its realtime microsecond clock). No sample
//   of ours in that second is 0 %. A driver without per-process samples gets
//   NVML_ERROR_NOT_SUPPORTED (nvidia-smi shows N/A): the card's figure is never passed off as the
//   container's. Encoder and decoder utilisation likewise, from the samples' encUtil / decUtil.
#include "interposer/hook_prologue.h"
#include "interposer/nvml_own_share.h"
#include "interposer/nvml_slice.h"

namespace gs = gpuslice::interposer;

GS_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                       nvmlProcessUtilizationSample_t* utilization,
                                                       unsigned int* processSamplesCount,
                                                       unsigned long long lastSeenTimeStamp) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetProcessUtilization);
  if (processSamplesCount == nullptr || gs::nvml_slice_record(device) < 0)
    return real(device, utilization, processSamplesCount, lastSeenTimeStamp);
  unsigned capacity = utilization == nullptr ? 0 : *processSamplesCount;
  nvmlReturn_t r = gs::hand_out_own_list<nvmlProcessUtilizationSample_t>(
      [&](nvmlProcessUtilizationSample_t* buffer, unsigned* count) {
        return real(device, buffer, count, lastSeenTimeStamp);
      },
      &capacity, utilization);
  *processSamplesCount = capacity;
  if (r == NVML_SUCCESS && capacity == 0) return NVML_ERROR_NOT_FOUND;  // as NVML: no sample newer
  return r;
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device,
                                                             nvmlProcessesUtilizationInfo_t* info) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetProcessesUtilizationInfo);
  if (info == nullptr || gs::nvml_slice_record(device) < 0) return real(device, info);
  unsigned capacity = info->procUtilArray == nullptr ? 0 : info->processSamplesCount;
  nvmlReturn_t r =
      gs::hand_out_own_struct_list(real, device, info, &nvmlProcessesUtilizationInfo_t::processSamplesCount,
                                   &nvmlProcessesUtilizationInfo_t::procUtilArray, &capacity);
  info->processSamplesCount = capacity;
  if (r == NVML_SUCCESS && capacity == 0) return NVML_ERROR_NOT_FOUND;
  return r;
}

namespace {

// Encoder / decoder: the real call checks the arguments and gives the sampling period; the
// utilisation is then the container's.
template <class Real>
nvmlReturn_t own_video_utilization(Real real, nvmlDevice_t device, unsigned* utilization, unsigned* period_us,
                                   bool encoder) {
  nvmlReturn_t r = real(device, utilization, period_us);
  if (r != NVML_SUCCESS || gs::nvml_slice_record(device) < 0) return r;
  gs::OwnShare share;
  r = gs::own_share(device, &share);
  if (r != NVML_SUCCESS) return r;
  *utilization = encoder ? share.encoder : share.decoder;
  return NVML_SUCCESS;
}

}  // namespace

GS_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetUtilizationRates);
  if (utilization == nullptr || gs::nvml_slice_record(device) < 0) return real(device, utilization);
  gs::OwnShare share;
  nvmlReturn_t r = gs::own_share(device, &share);
  if (r != NVML_SUCCESS) return r;
  *utilization = nvmlUtilization_t{share.sm, share.memory};
  return NVML_SUCCESS;
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int* utilization,
                                                       unsigned int* samplingPeriodUs) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetEncoderUtilization);
  return own_video_utilization(real, device, utilization, samplingPeriodUs, true);
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int* utilization,
                                                       unsigned int* samplingPeriodUs) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetDecoderUtilization);
  return own_video_utilization(real, device, utilization, samplingPeriodUs, false);
}

// The card's utilisation sample buffers describe every tenant at once and cannot be split by
// process: on a device of the slice they are not supported (nvidia-smi prints N/A for them).
// Power and clock samples are the card's and stay as they are.
GS_EXPORT nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t device, nvmlSamplingType_t type,
                                            unsigned long long lastSeenTimeStamp,
                                            nvmlValueType_t* sampleValType, unsigned int* sampleCount,
                                            nvmlSample_t* samples) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetSamples);
  const bool utilization = type == NVML_GPU_UTILIZATION_SAMPLES || type == NVML_MEMORY_UTILIZATION_SAMPLES ||
                           type == NVML_ENC_UTILIZATION_SAMPLES || type == NVML_DEC_UTILIZATION_SAMPLES ||
                           type == NVML_JPG_UTILIZATION_SAMPLES || type == NVML_OFA_UTILIZATION_SAMPLES;
  if (utilization && gs::nvml_slice_record(device) >= 0) return NVML_ERROR_NOT_SUPPORTED;
  return real(device, type, lastSeenTimeStamp, sampleValType, sampleCount, samples);
}
