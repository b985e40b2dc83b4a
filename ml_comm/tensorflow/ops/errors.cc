// The TensorFlow status of a failure: the error code of its kind, and the core's status
// as a payload, from which ml_comm's Python layer raises the class of that kind
// (tensorflow/errors.py). The one table from the core's statuses to TensorFlow's codes.

#include "common.h"

namespace ml_comm_tf {

namespace {

constexpr char kStatusPayload[] = "ml_comm.status";

}  // namespace

absl::StatusCode CodeOf(int status) {
  switch (status) {
    case MLC_OK: return absl::StatusCode::kOk;
    // Ranks that disagree: the request cannot run as submitted (Horovod's ops use it too).
    case MLC_ERR_MISMATCH: return absl::StatusCode::kFailedPrecondition;
    // This rank's argument, or its values (the message names the kind).
    case MLC_ERR_ARG: return absl::StatusCode::kInvalidArgument;
    case MLC_ERR_NONFINITE: return absl::StatusCode::kInvalidArgument;
    case MLC_ERR_OVERFLOW: return absl::StatusCode::kInvalidArgument;
    case MLC_ERR_STALL: return absl::StatusCode::kDeadlineExceeded;
    case MLC_ERR_PEER_LOST: return absl::StatusCode::kUnavailable;
    case MLC_ERR_NOMEM: return absl::StatusCode::kResourceExhausted;
    // The request was cancelled: with the step that submitted it, or by finalize.
    case MLC_ERR_STATE: return absl::StatusCode::kCancelled;
    case MLC_ERR_THREAD_LEVEL: return absl::StatusCode::kFailedPrecondition;
    case MLC_ERR_MPI: return absl::StatusCode::kInternal;
    default: return absl::StatusCode::kUnknown;
  }
}

absl::Status Carrying(absl::Status error, int status) {
  const std::string text = std::to_string(status);
  // From a string_view: the Cord constructor that TensorFlow's library exports.
  error.SetPayload(kStatusPayload, absl::Cord(absl::string_view(text)));
  return error;
}

absl::Status CoreError(int status, std::string_view message) {
  return Carrying(absl::Status(CodeOf(status), message), status);
}

}  // namespace ml_comm_tf

// For the Python layer (ctypes): the payload's key, and the table (which
// tests/mpi/test_tf_errors.py checks code by code).
extern "C" const char *mlc_tf_status_payload() { return ml_comm_tf::kStatusPayload; }
extern "C" int mlc_tf_error_code(int status) {
  return static_cast<int>(ml_comm_tf::CodeOf(status));
}
