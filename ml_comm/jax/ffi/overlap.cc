// The XLA FFI handlers behind Keras's JAX train step with the average overlapping
// backprop (ml_comm/keras/backend/jax/overlap.py): three custom calls around one keyed
// group of the core per step and team.
//
//   ml_comm_step_open    at the step's start: ends the team's previous group if its step
//                        failed inside XLA (cancelled, waited for), opens this step's
//                        group over the layout (attributes counts, shapes, dtype: the
//                        core's fused order) and returns the step's ticket (s32).
//   ml_comm_step_submit  in backprop, once per weight, as soon as its gradient exists:
//                        copies the gradient into the step's staging buffer and hands
//                        that slot to the group (attribute slot); returns the gradient
//                        (aliased to its operand: no copy where XLA aliases it).
//   ml_comm_step_wait    in the optimizer's apply: operands the ticket and the submits'
//                        results (attribute slots: each one's place in the layout);
//                        copies each average into its result as soon as the core has
//                        reduced it (mlc_team_group_watch), while later segments are still
//                        on the wire, and returns once the group is done and sealed.
//
// The core reads and writes only the staging buffer, which this file owns, never a
// buffer of XLA's: a step that fails inside XLA after some submits (its buffers freed
// at once) leaves the core nothing of XLA's to touch, and the next opening cancels the
// group and waits for it before the staging is reused. A submit or wait that fails
// cancels the group itself, so that the other ranks' steps fail now, naming this rank,
// instead of at the stall abort. Costs: one copy of every gradient in, during backprop,
// and one out, overlapping the rest of the reduction but for the last tensors'.
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common.h"

namespace ffi = xla::ffi;
using mlc_jax::CoreDtype;
using mlc_jax::Failure;

namespace {

constexpr int64_t kGroupKey = 1;  // one open group per team at a time on this path

// What the core's callbacks tell a step's wait: the tensors not done yet, the first
// failure, and the slots reduced (before the seal) that the wait has not copied out.
struct Completion {
  std::mutex mutex;
  std::condition_variable changed;
  int64_t pending = 0;
  int status = MLC_OK;
  std::vector<int> reduced;

  void Add() {
    std::lock_guard<std::mutex> lock(mutex);
    ++pending;
  }
  int Wait() {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [this] { return pending == 0; });
    const int first = status;
    status = MLC_OK;
    reduced.clear();
    return first;
  }
  static void Done(void *user_data, int status) {  // an mlc_callback
    auto *self = static_cast<Completion *>(user_data);
    std::lock_guard<std::mutex> lock(self->mutex);
    if (status != MLC_OK && self->status == MLC_OK) self->status = status;
    if (--self->pending == 0) self->changed.notify_all();
  }
  static void Reduced(void *user_data, int index) {  // an mlc_ready_callback
    auto *self = static_cast<Completion *>(user_data);
    std::lock_guard<std::mutex> lock(self->mutex);
    self->reduced.push_back(index);
    self->changed.notify_all();
  }
};

// One team's step: the layout of its group, the staging buffer the core reduces in, and
// what its callbacks report.
struct OpenStep {
  std::mutex mutex;
  mlc_team *team = nullptr;      // the team of the open group (valid while open)
  int64_t step = 0;              // the last opened step's id (1, 2, ...; the core's step)
  int64_t opener = 0;            // the core's id that cancels the open group; 0: none
  bool open = false;             // a group opened and not yet waited for
  Completion completion;
  int dtype = -1;
  std::vector<int64_t> counts;   // elements per slot, layout order
  std::vector<uint64_t> shapes;  // shape digests per slot
  std::vector<size_t> offsets;   // byte offset of each slot in staging
  std::vector<bool> arrived;
  std::vector<unsigned char> staging;

  int32_t ticket() const { return static_cast<int32_t>(step & 0x7fffffff); }
};

std::atomic<int64_t> steps_averaged{0};  // waits that returned averages, for tests
std::mutex steps_mutex;
std::unordered_map<int64_t, std::unique_ptr<OpenStep>> steps;  // by live team id

OpenStep *StepOf(int64_t team_id, bool create) {
  std::lock_guard<std::mutex> lock(steps_mutex);
  auto found = steps.find(team_id);
  if (found != steps.end()) return found->second.get();
  if (!create) return nullptr;
  return (steps[team_id] = std::make_unique<OpenStep>()).get();
}

// The open group ended without its wait (its step failed): cancelled where still open
// (ERR_STATE: every tensor had arrived, it runs to its end), and waited for, so that
// the core no longer uses the staging. Called with step.mutex held.
void Settle(OpenStep &step) {
  if (!step.open) return;
  if (step.opener) mlc_team_group_cancel_opened(step.team, step.opener);
  step.completion.Wait();
  step.open = false;
  step.opener = 0;
}

// Hand slot `slot` (already in staging) to the group. Called with step.mutex held.
int Arrive(OpenStep &step, size_t slot, char *err, size_t errlen) {
  unsigned char *data = step.staging.data() + step.offsets[slot];
  step.completion.Add();
  int rc = mlc_team_group_arrive_part(
      step.team, kGroupKey, static_cast<int>(step.counts.size()), step.counts.data(),
      step.shapes.data(), nullptr, step.dtype, MLC_OP_AVERAGE, 0, 1, 1 << step.dtype,
      static_cast<int>(slot), step.step, data, data, Completion::Done, &step.completion, err, errlen);
  if (rc != MLC_OK) {
    Completion::Done(&step.completion, MLC_OK);  // not handed over: nothing to wait for
    return rc;
  }
  step.arrived[slot] = true;
  return MLC_OK;
}

// Copy a gradient into its slot and hand it over; on failure the group is cancelled.
ffi::Error SubmitSlot(OpenStep &step, size_t slot, const ffi::AnyBuffer &grad) {
  if (slot >= step.counts.size() || step.arrived[slot]) {
    Settle(step);
    return Failure(MLC_ERR_STATE, "gradients failed: a weight's gradient was handed over "
                                  "twice, or to a slot the step does not have");
  }
  if (CoreDtype(grad.element_type()) != step.dtype ||
      static_cast<int64_t>(grad.element_count()) != step.counts[slot]) {
    Settle(step);
    return Failure(MLC_ERR_ARG, "gradients failed: a gradient's dtype or size differs from "
                                "its weight's in the step's layout");
  }
  std::memcpy(step.staging.data() + step.offsets[slot], grad.untyped_data(),
              grad.size_bytes());
  char err[512] = {0};
  int rc = Arrive(step, slot, err, sizeof err);
  if (rc != MLC_OK) {
    Settle(step);
    return Failure(rc, std::string("gradients failed: ") + err);
  }
  return ffi::Error::Success();
}

// Copy the slot into its result and mark it copied (null: done already).
void CopyOut(const OpenStep &step, size_t slot, std::vector<void *> &results) {
  if (slot >= results.size() || !results[slot]) return;
  const size_t bytes = static_cast<size_t>(step.counts[slot]) * mlc_dtype_size(step.dtype);
  std::memcpy(results[slot], step.staging.data() + step.offsets[slot], bytes);
  results[slot] = nullptr;
}

// The wait of a step whose slots have all been handed over: each slot is copied into its
// result (by slot) as soon as the core reports it reduced, so that only the last ones'
// copies follow the group's end; the group's status once every done callback ran. The
// copies are meaningless unless that status is MLC_OK (the seal may still fail the group).
int CopyOutWhileReducing(OpenStep &step, std::vector<void *> &results) {
  Completion &completion = step.completion;
  std::unique_lock<std::mutex> lock(completion.mutex);
  for (;;) {
    completion.changed.wait(
        lock, [&] { return !completion.reduced.empty() || completion.pending == 0; });
    if (completion.reduced.empty()) break;  // and nothing pending: the group is done
    std::vector<int> batch;
    batch.swap(completion.reduced);
    lock.unlock();
    for (int slot : batch) CopyOut(step, static_cast<size_t>(slot), results);
    lock.lock();
  }
  const int status = completion.status;
  completion.status = MLC_OK;
  lock.unlock();
  if (status == MLC_OK) {  // slots never reported (empty ones): copied now
    for (size_t slot = 0; slot < results.size(); ++slot) CopyOut(step, slot, results);
  }
  return status;
}

ffi::Error Open(ffi::Result<ffi::Buffer<ffi::S32>> ticket, int64_t team_id,
                ffi::Span<const int64_t> counts, ffi::Span<const int64_t> shapes,
                int64_t dtype) {
  mlc_jax::HeldTeam held(team_id);
  if (!held.get()) return mlc_jax::StaleStep();
  if (counts.size() == 0 || counts.size() != shapes.size()) {
    return Failure(MLC_ERR_ARG, "gradients failed: a step's layout needs a count and a shape "
                                "per weight");
  }
  OpenStep *step = StepOf(team_id, true);  // lives until finalize (CloseSteps)
  if (!step) return Failure(MLC_ERR_NOMEM, "gradients failed: no memory for a training step");
  std::lock_guard<std::mutex> lock(step->mutex);
  Settle(*step);
  const size_t n = counts.size();
  const size_t item = mlc_dtype_size(static_cast<int>(dtype));
  step->team = held.get();
  step->dtype = static_cast<int>(dtype);
  step->counts.assign(counts.begin(), counts.end());
  step->shapes.resize(n);
  step->offsets.resize(n);
  size_t bytes = 0;
  for (size_t k = 0; k < n; ++k) {
    step->shapes[k] = static_cast<uint64_t>(shapes[k]);
    step->offsets[k] = bytes;
    bytes += static_cast<size_t>(counts[k]) * item;
  }
  step->arrived.assign(n, false);
  step->staging.resize(bytes);
  step->step += 1;
  char err[512] = {0};
  int64_t opener = 0;
  int rc = mlc_team_group_open_part(held.get(), kGroupKey, static_cast<int>(n),
                                    step->counts.data(), step->shapes.data(), nullptr, step->dtype,
                                    MLC_OP_AVERAGE, 0, 1, 1 << step->dtype, step->step,
                                    &opener, err, sizeof err);
  if (rc != MLC_OK) return Failure(rc, std::string("gradients failed: ") + err);
  // No opener: a group of this step was complete before it opened (not on this path).
  if (opener) mlc_team_group_watch(held.get(), opener, Completion::Reduced, &step->completion);
  step->opener = opener;
  step->open = true;
  *ticket->typed_data() = step->ticket();
  return ffi::Error::Success();
}

// The open step of the team that this ticket names, locked; else an error.
ffi::Error Find(int64_t team_id, int32_t ticket, OpenStep **found,
                std::unique_lock<std::mutex> *lock) {
  OpenStep *step = StepOf(team_id, false);
  if (step) {
    *lock = std::unique_lock<std::mutex>(step->mutex);
    if (step->open && step->ticket() == ticket) {
      *found = step;
      return ffi::Error::Success();
    }
  }
  return Failure(MLC_ERR_STATE, "gradients failed: a gradient of a training step whose "
                                "group is no longer open (the step failed, or finalize ran)");
}

ffi::Error Submit(ffi::AnyBuffer grad, ffi::Buffer<ffi::S32> ticket,
                  ffi::Result<ffi::AnyBuffer> out, int64_t team_id, int64_t slot) {
  mlc_jax::HeldTeam held(team_id);
  if (!held.get()) return mlc_jax::StaleStep();
  OpenStep *step = nullptr;
  std::unique_lock<std::mutex> lock;
  ffi::Error found = Find(team_id, *ticket.typed_data(), &step, &lock);
  if (found.failure()) return found;
  if (out->untyped_data() != grad.untyped_data()) {  // XLA did not alias: pass it on
    std::memcpy(out->untyped_data(), grad.untyped_data(), grad.size_bytes());
  }
  return SubmitSlot(*step, static_cast<size_t>(slot), grad);
}

ffi::Error Wait(ffi::Buffer<ffi::S32> ticket, ffi::RemainingArgs grads,
                ffi::RemainingRets outs, int64_t team_id, ffi::Span<const int64_t> slots) {
  mlc_jax::HeldTeam held(team_id);
  if (!held.get()) return mlc_jax::StaleStep();
  OpenStep *step = nullptr;
  std::unique_lock<std::mutex> lock;
  ffi::Error found = Find(team_id, *ticket.typed_data(), &step, &lock);
  if (found.failure()) return found;
  if (grads.size() != slots.size() || outs.size() != slots.size() ||
      slots.size() != step->counts.size()) {
    Settle(*step);
    return Failure(MLC_ERR_ARG, "gradients failed: the step's wait needs every weight's "
                                "gradient once");
  }
  for (size_t k = 0; k < slots.size(); ++k) {  // submitted in backprop, or now
    const size_t slot = static_cast<size_t>(slots[k]);
    if (slot < step->arrived.size() && step->arrived[slot]) continue;
    auto grad = grads.get<ffi::AnyBuffer>(k);
    if (grad.has_error()) {
      Settle(*step);
      return grad.error();
    }
    ffi::Error submitted = SubmitSlot(*step, slot, *grad);
    if (submitted.failure()) return submitted;
  }
  std::vector<void *> results(step->counts.size(), nullptr);  // by slot
  for (size_t k = 0; k < slots.size(); ++k) {
    auto out = outs.get<ffi::AnyBuffer>(k);
    if (out.has_error()) {
      Settle(*step);
      return out.error();
    }
    results[static_cast<size_t>(slots[k])] = (*out)->untyped_data();
  }
  const int status = CopyOutWhileReducing(*step, results);
  step->open = false;
  step->opener = 0;
  if (status != MLC_OK) {
    char err[512] = {0};
    return Failure(status, std::string("gradients failed: ") +
                               mlc_team_last_error(held.get(), err, sizeof err));
  }
  steps_averaged.fetch_add(1);
  return ffi::Error::Success();
}

}  // namespace

namespace mlc_jax {
void CloseSteps() {
  std::lock_guard<std::mutex> lock(steps_mutex);
  for (auto &entry : steps) {
    std::lock_guard<std::mutex> step_lock(entry.second->mutex);
    Settle(*entry.second);
  }
  steps.clear();
}
}  // namespace mlc_jax

// A compiled step failed outside these calls (another op, a callback) and left its group
// open: cancel it now, so that the other ranks' steps fail now, naming this rank, instead
// of waiting for this rank's next step or the stall abort.
extern "C" void mlc_jax_abandon_steps(void) {
  std::lock_guard<std::mutex> lock(steps_mutex);
  for (auto &entry : steps) {
    std::lock_guard<std::mutex> step_lock(entry.second->mutex);
    Settle(*entry.second);
  }
}

extern "C" int64_t mlc_jax_overlapped_steps(void) { return steps_averaged.load(); }

XLA_FFI_DEFINE_HANDLER_SYMBOL(MlCommStepOpen, Open,
                              ffi::Ffi::Bind()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Attr<int64_t>("team_id")
                                  .Attr<ffi::Span<const int64_t>>("counts")
                                  .Attr<ffi::Span<const int64_t>>("shapes")
                                  .Attr<int64_t>("dtype"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(MlCommStepSubmit, Submit,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<int64_t>("team_id")
                                  .Attr<int64_t>("slot"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(MlCommStepWait, Wait,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<int64_t>("team_id")
                                  .Attr<ffi::Span<const int64_t>>("slots"));
