// What the op files share: the live-team registry, dtype mapping, error text and
// the bookkeeping that finishes an asynchronous kernel from the core's callback.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "tensorflow/core/framework/cancellation.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/types.h"

extern "C" {
#include <stddef.h>
#include <stdint.h>
#include "ml_comm.h"
}

namespace ml_comm_tf {

// A group's digests per tensor, its shapes or labels (an int64 attr holds the uint64's
// bits); NULL: none said.
inline const uint64_t *Digests(const std::vector<int64_t> &digests) {
  return digests.empty() ? nullptr : reinterpret_cast<const uint64_t *>(digests.data());
}

// mlc_tensor.shape for a TensorFlow tensor (row-major: its dimensions as they are).
inline uint64_t ShapeDigest(const tensorflow::Tensor &t) {
  const auto dims = t.shape().dim_sizes();
  static_assert(sizeof(dims[0]) == sizeof(int64_t), "TensorFlow's dimensions are the core's int64");
  return mlc_shape_digest(static_cast<int>(dims.size()), reinterpret_cast<const int64_t *>(dims.data()));
}

using tensorflow::AsyncOpKernel;
using tensorflow::DataType;
using tensorflow::OpInputList;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::OpOutputList;
using tensorflow::Tensor;

// The one mapping from the core's dtypes (enum mlc_dtype in ml_comm.h) to
// TensorFlow's: the core's code, TensorFlow's enum and the C++ element type. The ops'
// type constraint, CoreDtype and every per-type dispatch derive from it; a dtype
// added to the core fails the static_assert until it has its row here.
template <int kCore, DataType kTf, typename Element>
struct Dtype {
  static constexpr int core = kCore;
  static constexpr DataType tf = kTf;
  using type = Element;
};

using Dtypes = std::tuple<Dtype<MLC_FLOAT32, tensorflow::DT_FLOAT, float>,
                          Dtype<MLC_FLOAT64, tensorflow::DT_DOUBLE, double>,
                          Dtype<MLC_FLOAT16, tensorflow::DT_HALF, Eigen::half>,
                          Dtype<MLC_BFLOAT16, tensorflow::DT_BFLOAT16, tensorflow::bfloat16>,
                          Dtype<MLC_INT32, tensorflow::DT_INT32, int32_t>,
                          Dtype<MLC_INT64, tensorflow::DT_INT64, int64_t>,
                          Dtype<MLC_UINT8, tensorflow::DT_UINT8, uint8_t>,
                          Dtype<MLC_INT8, tensorflow::DT_INT8, int8_t>,
                          Dtype<MLC_UINT16, tensorflow::DT_UINT16, uint16_t>,
                          Dtype<MLC_INT16, tensorflow::DT_INT16, int16_t>,
                          Dtype<MLC_BOOL, tensorflow::DT_BOOL, bool>>;
static_assert(std::tuple_size_v<Dtypes> == MLC_NUM_DTYPES, "one row per dtype of ml_comm.h");

// Calls f(row) for every row of Dtypes, in the core's order.
template <typename F>
void ForEachDtype(F &&f) {
  std::apply([&](auto... row) { (f(row), ...); }, Dtypes{});
}

// The ops' type attribute, "T: {float, double, ...}", from Dtypes: every dtype for the
// ops that move values, the ones the core reduces (mlc_dtype_is_reducible: not bool)
// for the ops that reduce.
inline std::string TypeAttr(bool reduces = false) {
  std::string names;
  ForEachDtype([&](auto row) {
    if (reduces && !mlc_dtype_is_reducible(row.core)) return;
    names += (names.empty() ? "" : ", ") + tensorflow::DataTypeString(row.tf);
  });
  return "T: {" + names + "}";
}
inline std::string ReducedTypeAttr() { return TypeAttr(true); }

// Which part of the caller's gradients() call an op is (one op or group per dtype):
// the core compares it across ranks, so lists whose dtypes differ fail on every rank
// with the dtypes named instead of leaving the extra dtype's op waiting.
// check_weights: the op averages a traced step's gradients, a step of the check that the
// job shares its weights (mlc_team_weights_step); other reductions are no steps.
struct CallPart {
  int part = 0, nparts = 1, call_dtypes = 0;
  bool check_weights = false;
  int64_t step = 0, index = 0;  // the call's place, where the op knows it (a pipelined step)
};
#define ML_COMM_CALL_PART_ATTRS                                                         \
  Attr("part: int = 0").Attr("nparts: int = 1").Attr("call_dtypes: int = 0").Attr( \
      "check_weights: bool = false")
inline tensorflow::Status ReadCallPart(OpKernelConstruction *c, CallPart *out) {
  TF_RETURN_IF_ERROR(c->GetAttr("part", &out->part));
  TF_RETURN_IF_ERROR(c->GetAttr("nparts", &out->nparts));
  TF_RETURN_IF_ERROR(c->GetAttr("check_weights", &out->check_weights));
  return c->GetAttr("call_dtypes", &out->call_dtypes);
}

// The team behind a live id, held (mlc_team_acquire) while this object lives, so
// that finalize() on another thread waits for the use instead of freeing the team
// under it; get() is nullptr, with the op's status set, when the team is gone or
// being finalized (ml_comm_ops.cc). Completion callbacks run on the team's own
// threads, which finalize joins before it frees the team: they need no hold.
mlc_team *AcquireLive(int64_t id, bool *registered = nullptr);  // nullptr: gone or closing
class HeldTeam {
 public:
  HeldTeam(OpKernelContext *ctx, int64_t id);
  ~HeldTeam() {
    if (team_) mlc_team_release(team_);
  }
  HeldTeam(const HeldTeam &) = delete;
  HeldTeam &operator=(const HeldTeam &) = delete;
  mlc_team *get() const { return team_; }

 private:
  mlc_team *team_ = nullptr;
};

// The list ops' registration: N tensors of one dtype in (types: TypeAttr() or
// ReducedTypeAttr()), N out shaped as them, on the team the id team_id names.
// Use: REGISTER_OP(name).ML_COMM_LIST_OP("reduced", ReducedTypeAttr()).Attr(...)
inline tensorflow::Status ListShapes(tensorflow::shape_inference::InferenceContext *c) {
  for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->input(i));
  return absl::OkStatus();
}
#define ML_COMM_LIST_OP(outputs, types) \
  Input("tensors: N * T")               \
      .Output(outputs ": N * T")        \
      .Attr("N: int >= 1")              \
      .Attr(types)                      \
      .Attr("team_id: int")             \
      .SetIsStateful()                  \
      .SetShapeFn(ListShapes)

// An asynchronous kernel on the team its team_id attribute names, held while Start
// runs; when the team is gone the op fails (HeldTeam sets why) without calling Start.
class TeamKernel : public AsyncOpKernel {
 public:
  explicit TeamKernel(OpKernelConstruction *c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("team_id", &team_id_));
  }

  void ComputeAsync(OpKernelContext *ctx, DoneCallback done) final {
    HeldTeam held(ctx, team_id_);
    if (held.get() == nullptr) {
      done();
      return;
    }
    Start(ctx, held.get(), std::move(done));
  }

 protected:
  // Starts the call; done() runs once it has finished (from the core's callback, or
  // here when the call ends at once).
  virtual void Start(OpKernelContext *ctx, mlc_team *team, DoneCallback done) = 0;

  int64_t team_id_ = 0;
};

// The core's code of a TensorFlow dtype, or -1.
inline int CoreDtype(DataType dt) {
  int code = -1;
  ForEachDtype([&](auto row) {
    if (row.tf == dt) code = row.core;
  });
  return code;
}

// A failure's TensorFlow status (errors.cc): the code of its kind (CodeOf: ranks that
// disagree FailedPrecondition, a bad argument or bad values InvalidArgument, a stall
// DeadlineExceeded, a lost rank Unavailable, a cancelled request Cancelled, ...) and the
// core's status as a payload, from which the Python layer raises the class of that kind.
absl::StatusCode CodeOf(int status);
absl::Status CoreError(int status, std::string_view message);
// The weights check's judgement of an op of part.check_weights (OK for any other op):
// `call` names the gradients call it belongs to alike in every run (the group's key, or
// the layout of its inputs), the run's step id the step.
absl::Status WeightsStep(OpKernelContext *ctx, mlc_team *team, const CallPart &part, uint64_t call);
// WeightsStep for a list op, its call named by its inputs' element counts and dtype and
// its part (made only for an op of part.check_weights: every other op runs no check).
absl::Status ListWeightsStep(OpKernelContext *ctx, mlc_team *team, const CallPart &part);
// `error` (a code chosen here, e.g. a bad argument found by the op) carrying `status`.
absl::Status Carrying(absl::Status error, int status);

// The core's words for the status, then the team's last message.
inline std::string Failure(mlc_team *team, int status) {
  char text[512];
  mlc_team_last_error(team, text, sizeof text);
  return std::string(mlc_status_name(status)) + (text[0] ? std::string(": ") + text : "");
}

// What the core's callback needs to finish the kernel.
struct Pending {
  mlc_team *team;
  OpKernelContext *ctx;
  AsyncOpKernel::DoneCallback done;
  std::string what;
};

// mlc_callback for a Pending: sets the op's status on failure, calls done().
void FinishPending(void *user, int status);

// Allocates a list op's outputs (shaped as its inputs) and describes them to the
// core: out-of-place (source = input) or, with copy_inputs, pre-filled in place.
tensorflow::Status ListTensors(OpKernelContext *ctx, const char *out_name, bool copy_inputs,
                               std::vector<mlc_tensor> *tensors, DataType *dtype);

// Reduces the op's "tensors" into its "reduced" outputs (allocated here), adds `add`
// (tensors shaped as the outputs, or none) to them, then calls done(). labels: each
// tensor's mlc_tensor.label (none: not said).
void AllreduceList(OpKernelContext *ctx, mlc_team *team, int op, const CallPart &part,
                   std::vector<Tensor> add, AsyncOpKernel::DoneCallback done,
                   const std::vector<int64_t> &labels = {});

// Drops the pipelines of teams that are not in live_ids (pipelined_allreduce.cc).
void ForgetPipelines(const std::vector<int64_t> &live_ids);

}  // namespace ml_comm_tf
