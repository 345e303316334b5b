// The stream functions and the 2-D copy of codl_tvm/streams.py, as native TVM FFI functions.
//
// A split model calls them from the Relax VM several times per split op (OverlapCopies,
// LowerSlicesToBlockCopies). As Python functions each call takes the GIL, wraps its tensor
// and makes two to four more FFI calls; here a call is the CUDA calls alone. Semantics are
// those of codl_tvm/streams.py (its module doc); only the C ABI of TVM FFI
// (tvm/ffi/c_api.h) and the CUDA runtime that TVM's CUDA plugin loaded (found with dlopen,
// so nothing links against a CUDA toolkit) are used. codl_tvm/native/__init__.py builds this
// file with the machine's C++ compiler and registers the functions under streams.py's names.
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <tvm/ffi/c_api.h>
#include <tvm/ffi/extra/c_env_api.h>

#include <atomic>
#include <mutex>

namespace {

constexpr int kCopyStreamIsLegacyDefault = 0;  // TVM's copies run on the legacy default stream
constexpr int kMaxDevices = 64;
constexpr unsigned kStreamNonBlocking = 1;      // cudaStreamNonBlocking
constexpr unsigned kEventDisableTiming = 2;     // cudaEventDisableTiming
constexpr int kMemcpyDefault = 4;               // cudaMemcpyDefault: UVA tells host from device

typedef void* Stream;
typedef void* Event;

// The few CUDA runtime functions used, resolved once from the libcudart already loaded.
struct Cudart {
  int (*set_device)(int);
  int (*stream_create)(Stream*, unsigned);
  int (*stream_sync)(Stream);
  int (*event_create)(Event*, unsigned);
  int (*event_record)(Event, Stream);
  int (*stream_wait_event)(Stream, Event, unsigned);
  int (*memcpy_2d_async)(void*, size_t, const void*, size_t, size_t, size_t, int, Stream);
  const char* (*error_string)(int);
};

struct DeviceState {
  std::atomic<bool> ready{false};
  bool on_kernel_stream = false;  // between BEGIN and END
  Stream kernels = nullptr;
  Event kernels_done = nullptr;   // recorded on the kernel stream
  Event copies_done = nullptr;    // recorded on the copy stream
};

Cudart cudart;
bool cudart_ready = false;
std::mutex setup_mutex;
DeviceState devices[kMaxDevices];

int Raise(const char* message) {
  TVMFFIErrorSetRaisedFromCStr("RuntimeError", message);
  return -1;
}

int RaiseCuda(const char* what, int err) {
  char message[256];
  const char* text = cudart.error_string ? cudart.error_string(err) : "unknown";
  snprintf(message, sizeof(message), "codl native streams: %s failed: CUDA error %d (%s)", what,
           err, text);
  return Raise(message);
}

#define CUDA_CALL(what, call)                   \
  do {                                          \
    int err_ = (call);                          \
    if (err_ != 0) return RaiseCuda(what, err_); \
  } while (0)

template <typename F>
bool Resolve(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}

int LoadCudart() {
  if (cudart_ready) return 0;
  // newest first, loaded ones first: TVM's CUDA plugin links libcudart.so.13
  static const char* names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
                                "libcudart.so"};
  static const int modes[] = {RTLD_NOLOAD | RTLD_LAZY, RTLD_LAZY};
  void* lib = nullptr;
  for (int mode : modes) {
    for (const char* name : names) {
      if ((lib = dlopen(name, mode)) != nullptr) break;
    }
    if (lib != nullptr) break;
  }
  if (lib == nullptr) return Raise("codl native streams: no CUDA runtime library (libcudart)");
  bool ok = Resolve(lib, "cudaSetDevice", &cudart.set_device) &&
            Resolve(lib, "cudaStreamCreateWithFlags", &cudart.stream_create) &&
            Resolve(lib, "cudaStreamSynchronize", &cudart.stream_sync) &&
            Resolve(lib, "cudaEventCreateWithFlags", &cudart.event_create) &&
            Resolve(lib, "cudaEventRecord", &cudart.event_record) &&
            Resolve(lib, "cudaStreamWaitEvent", &cudart.stream_wait_event) &&
            Resolve(lib, "cudaMemcpy2DAsync", &cudart.memcpy_2d_async) &&
            Resolve(lib, "cudaGetErrorString", &cudart.error_string);
  if (!ok) return Raise("codl native streams: the CUDA runtime lacks a function it needs");
  cudart_ready = true;
  return 0;
}

// The kernel stream and events of a CUDA device, made once per process.
int State(int id, DeviceState** out) {
  if (id < 0 || id >= kMaxDevices) return Raise("codl native streams: device index out of range");
  DeviceState& s = devices[id];
  if (!s.ready.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(setup_mutex);
    if (!s.ready.load(std::memory_order_relaxed)) {
      if (LoadCudart() != 0) return -1;
      CUDA_CALL("cudaSetDevice", cudart.set_device(id));
      CUDA_CALL("cudaStreamCreateWithFlags", cudart.stream_create(&s.kernels, kStreamNonBlocking));
      CUDA_CALL("cudaEventCreateWithFlags", cudart.event_create(&s.kernels_done,
                                                               kEventDisableTiming));
      CUDA_CALL("cudaEventCreateWithFlags", cudart.event_create(&s.copies_done,
                                                               kEventDisableTiming));
      s.ready.store(true, std::memory_order_release);
    }
  }
  *out = &s;
  return 0;
}

// The DLTensor of argument i (a tensor object, or a DLTensor* from C callers).
int TensorArg(const TVMFFIAny* args, int32_t num_args, int i, DLTensor** out) {
  if (i >= num_args) return Raise("codl native streams: too few arguments");
  const TVMFFIAny& a = args[i];
  if (a.type_index == kTVMFFITensor) {
    *out = TVMFFITensorGetDLTensorPtr(a.v_obj);
  } else if (a.type_index == kTVMFFIDLTensorPtr) {
    *out = static_cast<DLTensor*>(a.v_ptr);
  } else {
    return Raise("codl native streams: expected a tensor argument");
  }
  return 0;
}

int IntArg(const TVMFFIAny* args, int32_t num_args, int i, int64_t* out) {
  if (i >= num_args || args[i].type_index != kTVMFFIInt) {
    return Raise("codl native streams: expected an integer argument");
  }
  *out = args[i].v_int64;
  return 0;
}

// Kernels issued after this wait for what `from` has queued so far.
int Order(Stream from, Stream to, Event event) {
  CUDA_CALL("cudaEventRecord", cudart.event_record(event, from));
  CUDA_CALL("cudaStreamWaitEvent", cudart.stream_wait_event(to, event, 0));
  return 0;
}

Stream CopyStream() { return reinterpret_cast<Stream>(kCopyStreamIsLegacyDefault); }

// Each stream function takes one tensor whose device names the GPU; on a CPU it does nothing.
typedef int (*StreamOp)(DLDevice dev, DeviceState* s);

template <StreamOp op>
int StreamCall(void*, const TVMFFIAny* args, int32_t num_args, TVMFFIAny* result) {
  result->type_index = kTVMFFINone;
  result->v_int64 = 0;
  DLTensor* t;
  if (TensorArg(args, num_args, 0, &t) != 0) return -1;
  if (t->device.device_type != kDLCUDA) return 0;
  DeviceState* s;
  if (State(t->device.device_id, &s) != 0) return -1;
  // stream 0 is the current device's legacy stream; TVM's calls set the device the same way
  CUDA_CALL("cudaSetDevice", cudart.set_device(t->device.device_id));
  return op(t->device, s);
}

int Begin(DLDevice dev, DeviceState* s) {
  CUDA_CALL("cudaStreamSynchronize", cudart.stream_sync(CopyStream()));  // the previous run
  if (TVMFFIEnvSetStream(dev.device_type, dev.device_id, s->kernels, nullptr) != 0) return -1;
  s->on_kernel_stream = true;
  return Order(CopyStream(), s->kernels, s->copies_done);
}

int CopiesWait(DLDevice, DeviceState* s) {
  return Order(s->kernels, CopyStream(), s->kernels_done);
}

int KernelsWait(DLDevice, DeviceState* s) {
  return Order(CopyStream(), s->kernels, s->copies_done);
}

int HostWaits(DLDevice, DeviceState*) {
  CUDA_CALL("cudaStreamSynchronize", cudart.stream_sync(CopyStream()));
  return 0;
}

int End(DLDevice dev, DeviceState* s) {
  if (Order(s->kernels, CopyStream(), s->kernels_done) != 0) return -1;
  s->on_kernel_stream = false;
  return TVMFFIEnvSetStream(dev.device_type, dev.device_id, CopyStream(), nullptr);
}

char* Bytes(DLTensor* t) { return static_cast<char*>(t->data) + t->byte_offset; }

// copy_block(src, dst, src_offset, src_pitch, dst_offset, dst_pitch, width, height)
int CopyBlock(void*, const TVMFFIAny* args, int32_t num_args, TVMFFIAny* result) {
  result->type_index = kTVMFFINone;
  result->v_int64 = 0;
  DLTensor *src, *dst;
  int64_t g[6];  // src_offset, src_pitch, dst_offset, dst_pitch, width, height
  if (TensorArg(args, num_args, 0, &src) != 0 || TensorArg(args, num_args, 1, &dst) != 0) {
    return -1;
  }
  for (int i = 0; i < 6; ++i) {
    if (IntArg(args, num_args, 2 + i, &g[i]) != 0) return -1;
  }
  if (g[1] < g[4] || g[3] < g[4] || g[5] < 0 || g[4] < 0) {
    return Raise("codl.copy_block: a row is wider than its pitch");
  }
  const char* from = Bytes(src) + g[0];
  char* to = Bytes(dst) + g[2];
  int src_type = src->device.device_type, dst_type = dst->device.device_type;
  if (src_type == kDLCPU && dst_type == kDLCPU) {
    for (int64_t row = 0; row < g[5]; ++row) memcpy(to + row * g[3], from + row * g[1], g[4]);
    return 0;
  }
  bool cuda_or_cpu = (src_type == kDLCUDA || src_type == kDLCPU || src_type == kDLCUDAHost) &&
                     (dst_type == kDLCUDA || dst_type == kDLCPU || dst_type == kDLCUDAHost);
  if (!cuda_or_cpu) return Raise("codl.copy_block: CUDA and CPU tensors only");
  const DLDevice& gpu = src_type == kDLCUDA ? src->device : dst->device;
  DeviceState* s;
  if (State(gpu.device_id, &s) != 0) return -1;
  CUDA_CALL("cudaSetDevice", cudart.set_device(gpu.device_id));
  // within the GPU: on the kernel stream, in order with the kernels it stands among
  bool within = src_type == kDLCUDA && dst_type == kDLCUDA && s->on_kernel_stream;
  CUDA_CALL("cudaMemcpy2DAsync",
            cudart.memcpy_2d_async(to, g[3], from, g[1], g[4], g[5], kMemcpyDefault,
                                   within ? s->kernels : CopyStream()));
  return 0;
}

}  // namespace

// Registers every function under `prefix` + its name; returns 0, or -1 with the error raised.
extern "C" __attribute__((visibility("default"))) int codl_register_streams(const char* prefix) {
  struct Entry {
    const char* name;
    TVMFFISafeCallType call;
  };
  const Entry entries[] = {{"begin", StreamCall<Begin>},
                           {"copies_wait_for_kernels", StreamCall<CopiesWait>},
                           {"kernels_wait_for_copies", StreamCall<KernelsWait>},
                           {"host_waits_for_copies", StreamCall<HostWaits>},
                           {"end", StreamCall<End>},
                           {"copy_block", CopyBlock}};
  for (const Entry& e : entries) {
    char name[256];
    snprintf(name, sizeof(name), "%s%s", prefix, e.name);
    TVMFFIObjectHandle f;
    if (TVMFFIFunctionCreate(nullptr, e.call, nullptr, &f) != 0) return -1;
    TVMFFIByteArray key{name, strlen(name)};
    int err = TVMFFIFunctionSetGlobal(&key, f, 1);
    TVMFFIObjectDecRef(f);
    if (err != 0) return -1;
  }
  return 0;
}
