// The XLA FFI handler behind ml_comm.jax.gradients: a custom call inside JAX's compiled
// step that hands XLA's host buffers to the core (no copy into Python and back, as
// jax.experimental.io_callback would make) and returns when the team has averaged them.
//
// Operands: the gradients, grouped by dtype (one part per dtype, each part's tensors in
// the core's fused layout order: ml_comm/core/layout.py); results: one buffer per
// operand, of its shape and dtype. Attributes: team_id (a live id registered by
// mlc_jax_set_live_teams, never reused, so a step compiled for an earlier session fails
// with a message instead of using a freed team), part_sizes (tensors per part) and
// check_weights (1: a compiled step's call, judged by the check that the job shares its
// weights, mlc_team_weights_step, by its layout; an eager call was judged by the caller). The
// core decides everything else (algorithm, inline or on its threads): this file only
// converts buffers and calls its public entry points.
#include <string>
#include <vector>

#include "common.h"

namespace ffi = xla::ffi;
using mlc_jax::CoreDtype;
using mlc_jax::Failure;

namespace {

ffi::Error Average(ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t team_id,
                   ffi::Span<const int64_t> part_sizes, int64_t check_weights) {
  mlc_jax::HeldTeam held(team_id);
  if (!held.get()) return mlc_jax::StaleStep();
  if (args.size() != rets.size()) {
    return Failure(MLC_ERR_ARG, "gradients failed: one result per gradient expected");
  }
  size_t total = 0;
  for (int64_t n : part_sizes) total += static_cast<size_t>(n);
  if (total != args.size()) {
    return Failure(MLC_ERR_ARG, "gradients failed: part sizes do not add up to the gradients");
  }
  std::vector<mlc_tensor> tensors(args.size());
  std::vector<int> codes(part_sizes.size());
  int call_dtypes = 0;
  size_t at = 0;
  for (size_t part = 0; part < part_sizes.size(); ++part) {
    for (int64_t k = 0; k < part_sizes[part]; ++k, ++at) {
      auto in = args.get<ffi::AnyBuffer>(at);
      auto out = rets.get<ffi::AnyBuffer>(at);
      if (in.has_error()) return in.error();
      if (out.has_error()) return out.error();
      int code = CoreDtype(in->element_type());
      if (code < 0) return Failure(MLC_ERR_ARG, "gradients failed: a dtype the core does not reduce");
      if (k == 0) codes[part] = code;
      if (code != codes[part]) return Failure(MLC_ERR_ARG, "gradients failed: a part of mixed dtypes");
      tensors[at].data = (*out)->untyped_data();
      // XLA hands the input's own buffer as the result where it may (the call aliases
      // each result to its operand): then the average is made in place.
      tensors[at].source = in->untyped_data() == tensors[at].data ? nullptr : in->untyped_data();
      tensors[at].count = static_cast<int64_t>(in->element_count());
      const auto dims = in->dimensions();  // row-major, as XLA lays out the call's operands
      tensors[at].shape = mlc_shape_digest(static_cast<int>(dims.size()), dims.begin());
    }
    call_dtypes |= 1 << codes[part];
  }
  const int nparts = static_cast<int>(part_sizes.size());
  mlc_team *team = held.get();
  if (check_weights) {  // the call named by its layout: the same call in every step
    uint64_t call = 1469598103934665603ull;  // FNV-1a
    for (const mlc_tensor &t : tensors) call = (call ^ t.shape ^ static_cast<uint64_t>(t.count)) * 1099511628211ull;
    for (int code : codes) call = (call ^ static_cast<uint64_t>(code)) * 1099511628211ull;
    char err[768] = {0};
    int rc = mlc_team_weights_step(team, 0, call, err, sizeof err);
    if (rc != MLC_OK) return Failure(rc, std::string("gradients failed: ") + err);
  }
  if (nparts == 0) {  // a list with no gradients: still a call every rank makes (empty)
    char err[512] = {0};
    int rc = mlc_team_allreduce_part(team, nullptr, 0, MLC_FLOAT32, MLC_OP_AVERAGE, 0, 1, 0, err,
                                     sizeof err);
    if (rc != MLC_OK) return Failure(rc, std::string("gradients failed: ") + err);
    return ffi::Error::Success();
  }
  if (nparts == 1) {  // the common call: blocking, so small ones may run on this thread
    char err[512] = {0};
    int rc = mlc_team_allreduce_part(team, tensors.data(), static_cast<int>(tensors.size()),
                                     codes[0], MLC_OP_AVERAGE, 0, 1, call_dtypes, err, sizeof err);
    if (rc != MLC_OK) return Failure(rc, std::string("gradients failed: ") + err);
    return ffi::Error::Success();
  }
  // One request per dtype, all in flight at once; every one is waited for.
  std::vector<mlc_request *> requests;
  int first_status = MLC_OK;
  std::string text;
  at = 0;
  for (int part = 0; part < nparts; ++part) {
    mlc_request *request = nullptr;
    int rc = mlc_team_allreduce_async_part(team, tensors.data() + at,
                                           static_cast<int>(part_sizes[part]), codes[part],
                                           MLC_OP_AVERAGE, part, nparts, call_dtypes, nullptr,
                                           nullptr, &request);
    at += static_cast<size_t>(part_sizes[part]);
    if (rc != MLC_OK) {
      if (first_status == MLC_OK) {
        char err[512] = {0};
        first_status = rc;
        text = mlc_team_last_error(team, err, sizeof err);
      }
      break;
    }
    requests.push_back(request);
  }
  for (mlc_request *request : requests) {
    int rc = mlc_request_wait(request);
    if (rc != MLC_OK && first_status == MLC_OK) {
      first_status = rc;
      text = mlc_request_message(request);
    }
    mlc_request_free(request);
  }
  if (first_status != MLC_OK) return Failure(first_status, "gradients failed: " + text);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MlCommAverage, Average,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<int64_t>("team_id")
                                  .Attr<ffi::Span<const int64_t>>("part_sizes")
                                  .Attr<int64_t>("check_weights"));
