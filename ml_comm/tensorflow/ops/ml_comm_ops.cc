// TensorFlow ops over the ml_comm C core: asynchronous kernels, no thread blocks.
//
// ComputeAsync hands (pointer, count, dtype) to the core and returns; the core's
// completion callback, on a communication thread, calls done() (a group of one
// small tensor is reduced on the op's own thread, see GroupSubmitOp::RunsHere). The ops:
//   MlCommGroupOpen         a keyed group opened at its step's start (a step that
//                           fails before any gradient exists still fails it)
//   MlCommGroupSubmit/Wait  one gradient of a keyed group: one pair per gradient,
//                           so each is submitted as soon as backprop produced it
//   MlCommAllreduceN        a whole list at once (eager mode, where ops run one by one)
//   MlCommBroadcastN        a list from root to every rank
// (MlCommPipelinedAllreduceN, for pipelined teams, is in pipelined_allreduce.cc.)
// A team crosses as its id (the attr team_id: the session's id of the team, never
// reused), which the live-team table below turns into the core's handle, so a graph kept
// past finalize() fails with a message, not a crash.

#include "common.h"
#include "result_memory.h"

namespace ml_comm_tf {

// The live teams by their id, never reused (a new team may get a finalized one's
// address; it never gets its id): a mirror of the session's registry (core/session.py,
// Session.teams and team_ids) that the Python layer sets at init and finalize
// (tensorflow/library.py set_live). The ops run on TensorFlow's threads and look a team up
// on every call, without Python's lock; finalize empties it before the teams go.
std::mutex live_mutex;
std::unordered_map<int64_t, uintptr_t> live_teams;

mlc_team *AcquireLive(int64_t id, bool *registered) {
  std::lock_guard<std::mutex> lock(live_mutex);  // finalize unregisters before it destroys
  auto found = live_teams.find(id);
  if (registered) *registered = found != live_teams.end();
  if (found == live_teams.end()) return nullptr;
  auto *team = reinterpret_cast<mlc_team *>(found->second);
  return mlc_team_acquire(team) == MLC_OK ? team : nullptr;
}

HeldTeam::HeldTeam(OpKernelContext *ctx, int64_t id) {
  bool registered = false;
  team_ = AcquireLive(id, &registered);
  if (team_) return;
  ctx->SetStatus(Carrying(
      tensorflow::errors::FailedPrecondition(
          registered ? "ml_comm: this op's team is being finalized (ml_comm.finalize() was "
                       "called on another thread)"
                     : "ml_comm: this op belongs to a team that no longer exists "
                       "(ml_comm.finalize() was called, or the graph was built in another "
                       "process); build the graph again after ml_comm.init()"),
      MLC_ERR_STATE));
}

void FinishPending(void *user, int status) {
  auto *p = static_cast<Pending *>(user);
  if (status != MLC_OK) {
    p->ctx->SetStatus(
        CoreError(status, absl::StrCat("ml_comm ", p->what, " failed: ", Failure(p->team, status))));
  }
  auto done = std::move(p->done);
  delete p;
  done();
}

}  // namespace ml_comm_tf

using namespace ml_comm_tf;

// A gradient's reduction is two ops. Submit hands the gradient to its keyed group
// and finishes at once, returning the output buffer (filled later by the core)
// and a token; Wait finishes when that buffer holds the result. Splitting them
// lets tf.function run the submits in program order, as it does with every
// stateful op, without a submit waiting on a reduction that needs later gradients.

// A submitted tensor is known by a token, an id never reused, in one registry: the
// core's callback, the Wait op and the step's cancellation each look it up there.
// When a step fails (TensorFlow cancels the step's CancellationManager, also where
// a Wait never ran), the cancellation cancels the tensor's open group in the core
// (mlc_team_group_cancel), so that the next step's tensors do not join it, and the
// token is dropped once the core is done with it, Wait or no Wait.
namespace {

struct Completion {
  mlc_team *team = nullptr;  // read only on the team's threads (the core's callback)
  int64_t team_id = 0, key = 0;
  int index = 0;
  // The core reads the input and writes the buffer after Submit has finished:
  // holding both Tensors keeps their memory alive until then.
  Tensor input, buffer;
  std::mutex mutex;
  bool finished = false;   // the core's callback ran
  bool abandoned = false;  // the step was cancelled before its Wait ran
  int status = MLC_OK;
  std::string message;
  OpKernelContext *waiter_ctx = nullptr;
  AsyncOpKernel::DoneCallback waiter;
  tensorflow::CancellationManager *cancellation = nullptr;
  tensorflow::CancellationToken cancel_token = 0;
};

std::mutex tokens_mutex;
std::unordered_map<int64_t, std::shared_ptr<Completion>> tokens;
int64_t last_token = 0;

int64_t AddToken(std::shared_ptr<Completion> c) {
  std::lock_guard<std::mutex> lock(tokens_mutex);
  tokens[++last_token] = std::move(c);
  return last_token;
}

std::shared_ptr<Completion> FindToken(int64_t id) {
  std::lock_guard<std::mutex> lock(tokens_mutex);
  auto found = tokens.find(id);
  return found == tokens.end() ? nullptr : found->second;
}

void DropToken(int64_t id) {
  std::lock_guard<std::mutex> lock(tokens_mutex);
  tokens.erase(id);
}

void *CoreUser(int64_t id) { return reinterpret_cast<void *>(static_cast<intptr_t>(id)); }

void FinishWait(OpKernelContext *ctx, int status, const std::string &message,
                AsyncOpKernel::DoneCallback done) {
  if (status != MLC_OK) ctx->SetStatus(CoreError(status, "ml_comm allreduce failed: " + message));
  done();
}

void CompleteTensor(void *user, int status) {
  const int64_t id = static_cast<int64_t>(reinterpret_cast<intptr_t>(user));
  std::shared_ptr<Completion> c = FindToken(id);
  if (!c) return;  // the token outlives the core's use of it
  std::unique_lock<std::mutex> lock(c->mutex);
  c->input = Tensor();  // the core is done reading it
  c->finished = true;
  c->status = status;
  if (status != MLC_OK) c->message = Failure(c->team, status);
  if (c->waiter) {
    auto done = std::move(c->waiter);
    OpKernelContext *ctx = c->waiter_ctx;
    const std::string message = c->message;
    lock.unlock();
    DropToken(id);
    FinishWait(ctx, status, message, std::move(done));
    return;
  }
  const bool abandoned = c->abandoned;
  lock.unlock();
  if (abandoned) DropToken(id);  // else Wait will find the result
}

// The step of a submitted tensor ended without its Wait, or failed while the Wait
// is pending: cancel the tensor's group if it is still open. A Wait already
// pending finishes when the group ends; else the token is dropped then.
void CancelToken(int64_t id) {
  std::shared_ptr<Completion> c = FindToken(id);
  if (!c) return;
  {
    std::lock_guard<std::mutex> lock(c->mutex);
    if (!c->waiter) {
      if (c->finished) {
        DropToken(id);
        return;
      }
      c->abandoned = true;
    }
  }
  if (mlc_team *team = AcquireLive(c->team_id)) {
    mlc_team_group_cancel(team, c->key, c->index, CoreUser(id));  // MLC_ERR_STATE: complete
    mlc_team_release(team);
  }
}

}  // namespace

// For tests: tokens whose reduction or Wait is still to come.
extern "C" int64_t mlc_tf_pending_tokens() {
  std::lock_guard<std::mutex> lock(tokens_mutex);
  return static_cast<int64_t>(tokens.size());
}

namespace {

// The step's id, which the step's opener and its submits share, so that the core pairs
// them in whatever order they run (never 0: the core's "no step").
int64_t StepOf(OpKernelContext *ctx) {
  const int64_t id = ctx->step_id();
  return id != 0 ? id : 1;
}

}  // namespace

absl::Status ml_comm_tf::WeightsStep(OpKernelContext *ctx, mlc_team *team, const CallPart &part,
                                     uint64_t call) {
  if (!part.check_weights) return absl::OkStatus();
  char err[768] = "";
  const int rc = mlc_team_weights_step(team, StepOf(ctx), call, err, sizeof err);
  return rc == MLC_OK ? absl::OkStatus() : CoreError(rc, absl::StrCat("ml_comm: ", err));
}

absl::Status ml_comm_tf::ListWeightsStep(OpKernelContext *ctx, mlc_team *team, const CallPart &part) {
  if (!part.check_weights) return absl::OkStatus();
  uint64_t call = 1469598103934665603ull ^ static_cast<uint64_t>(part.part);  // FNV-1a
  auto mix = [&call](uint64_t value) { call = (call ^ value) * 1099511628211ull; };
  OpInputList inputs;
  TF_RETURN_IF_ERROR(ctx->input_list("tensors", &inputs));
  for (int i = 0; i < inputs.size(); ++i) {
    mix(static_cast<uint64_t>(inputs[i].NumElements()));
    mix(static_cast<uint64_t>(inputs[i].dtype()));
  }
  return WeightsStep(ctx, team, part, call);
}

namespace {

// The attributes an opener and its submits share: which team and group, the group's
// layout (each tensor's element count and shape digest) and how it is reduced.
struct GroupAttrs {
  int64_t team_id = 0, group_key = 0;
  std::vector<int64_t> counts;
  std::vector<int64_t> shapes;  // mlc_tensor.shape of each tensor, as TensorFlow's int64 attr
  std::vector<int64_t> labels;  // and mlc_tensor.label
  bool average = true;
  int nranks = 0;
  CallPart part;

  tensorflow::Status Read(OpKernelConstruction *c) {
    TF_RETURN_IF_ERROR(c->GetAttr("team_id", &team_id));
    TF_RETURN_IF_ERROR(c->GetAttr("group_key", &group_key));
    TF_RETURN_IF_ERROR(c->GetAttr("counts", &counts));
    TF_RETURN_IF_ERROR(c->GetAttr("shapes", &shapes));
    if (!shapes.empty() && shapes.size() != counts.size())
      return tensorflow::errors::InvalidArgument("shapes: one per tensor of the group, or none");
    TF_RETURN_IF_ERROR(c->GetAttr("labels", &labels));
    if (!labels.empty() && labels.size() != counts.size())
      return tensorflow::errors::InvalidArgument("labels: one per tensor of the group, or none");
    TF_RETURN_IF_ERROR(c->GetAttr("average", &average));
    TF_RETURN_IF_ERROR(c->GetAttr("nranks", &nranks));
    return ReadCallPart(c, &part);
  }
  int Op() const { return average ? MLC_OP_AVERAGE : MLC_OP_SUM; }
};

// Whether the core's plan has this gradient's submit reduce it then and there (a group of
// one small tensor: mlc_team_group_by_submit), as every rank's plan says alike.
bool ReducedBySubmit(mlc_team *team, const std::vector<int64_t> &counts, DataType dtype) {
  return mlc_team_group_by_submit(team, static_cast<int>(counts.size()), counts.data(), CoreDtype(dtype));
}

}  // namespace

REGISTER_OP("MlCommGroupOpen")
    .Output("opener: int64")
    .Attr(ReducedTypeAttr())
    .Attr("team_id: int")
    .Attr("group_key: int")
    .Attr("counts: list(int)")
    .Attr("shapes: list(int) = []")
    .Attr("labels: list(int) = []")
    .Attr("average: bool = true")
    .Attr("nranks: int")
    .ML_COMM_CALL_PART_ATTRS
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
Open the keyed group group_key at the step's start: a step that fails before any of its
gradients exists cancels the group, so every rank fails that step, instead of this rank's
next step meeting the others' current one. The step's MlCommGroupSubmit ops do not wait
for it (the core pairs them by the step's id): where they ran first, it claims the group
they opened. opener: its id (0: no group, as for one rank, or the group is complete).
)doc");

// The step's cancellation (a failure, or the step's end) cancels the group if it is
// still open; once every submit of the step has run it is complete, and the
// cancellation finds nothing to do.
class GroupOpenOp : public tensorflow::OpKernel {
 public:
  explicit GroupOpenOp(OpKernelConstruction *c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("T", &dtype_));
    OP_REQUIRES_OK(c, group_.Read(c));
  }

  void Compute(OpKernelContext *ctx) override {
    Tensor *opener = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({}), &opener));
    opener->scalar<int64_t>()() = 0;
    const GroupAttrs &g = group_;
    if (g.nranks == 1) return;
    HeldTeam held(ctx, g.team_id);
    mlc_team *team = held.get();
    if (team == nullptr) return;
    OP_REQUIRES_OK(ctx, WeightsStep(ctx, team, g.part, static_cast<uint64_t>(g.group_key)));
    if (ReducedBySubmit(team, g.counts, dtype_)) return;
    int64_t id = 0;
    char err[256] = "";
    int rc = mlc_team_group_open_part(team, g.group_key, static_cast<int>(g.counts.size()), g.counts.data(),
                                      Digests(g.shapes), Digests(g.labels), CoreDtype(dtype_), g.Op(), g.part.part,
                                      g.part.nparts, g.part.call_dtypes, StepOf(ctx), &id, err, sizeof err);
    OP_REQUIRES(ctx, rc == MLC_OK, CoreError(rc, absl::StrCat("ml_comm: ", err)));
    opener->scalar<int64_t>()() = id;
    if (id == 0) return;  // every gradient of the step came first: nothing left to cancel
    tensorflow::CancellationManager *cm = ctx->cancellation_manager();
    if (cm == nullptr) return;
    const int64_t team_id = g.team_id;
    auto cancel = [team_id, id] {
      if (mlc_team *t = AcquireLive(team_id)) {
        mlc_team_group_cancel_opened(t, id);  // MLC_ERR_STATE: complete, nothing to do
        mlc_team_release(t);
      }
    };
    if (!cm->RegisterCallback(cm->get_cancellation_token(), cancel)) cancel();  // failing already
  }

 private:
  DataType dtype_;
  GroupAttrs group_;
};

REGISTER_KERNEL_BUILDER(Name("MlCommGroupOpen").Device(tensorflow::DEVICE_CPU), GroupOpenOp);

REGISTER_OP("MlCommGroupSubmit")
    .Input("tensor: T")
    .Output("buffer: T")
    .Output("token: int64")
    .Attr(ReducedTypeAttr())
    .Attr("team_id: int")
    .Attr("group_key: int")
    .Attr("index: int")
    .Attr("counts: list(int)")
    .Attr("shapes: list(int) = []")
    .Attr("labels: list(int) = []")
    .Attr("average: bool = true")
    .Attr("nranks: int")
    .ML_COMM_CALL_PART_ATTRS
    .SetIsStateful()
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext *c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->Scalar());
      return absl::OkStatus();
    })
    .Doc(R"doc(
Hand one tensor to the keyed group group_key as member `index`: all submits with
the same key form one fused sum or average over all ranks, laid out by `counts`,
which starts as soon as its leading members arrive. `buffer` receives the result;
read it only through MlCommGroupWait(buffer, token).
)doc");

class GroupSubmitOp : public tensorflow::OpKernel {
 public:
  explicit GroupSubmitOp(OpKernelConstruction *c) : OpKernel(c) {
    OP_REQUIRES_OK(c, group_.Read(c));
    OP_REQUIRES_OK(c, c->GetAttr("index", &index_));
    OP_REQUIRES(c, index_ >= 0 && index_ < static_cast<int>(group_.counts.size()),
                Carrying(tensorflow::errors::InvalidArgument("ml_comm: index outside counts"),
                         MLC_ERR_ARG));
  }

  void Compute(OpKernelContext *ctx) override {
    const Tensor &input = ctx->input(0);
    const GroupAttrs &g = group_;
    OP_REQUIRES(ctx, input.NumElements() == g.counts[index_],
                Carrying(tensorflow::errors::InvalidArgument(
                             "ml_comm: gradient ", index_, " has ", input.NumElements(),
                             " elements but the graph was built for ", g.counts[index_]),
                         MLC_ERR_ARG));
    HeldTeam held(ctx, g.team_id);
    mlc_team *team = held.get();
    if (team == nullptr) return;
    Tensor *token = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, tensorflow::TensorShape({}), &token));
    if (g.nranks == 1) {  // the average over one rank is the input itself
      ctx->set_output(0, input);
      token->scalar<int64_t>()() = 0;
      return;
    }
    // Whichever of the step's ops runs first fails the step that fails the check, before
    // any of its tensors is reduced (the opener may run after all of them).
    OP_REQUIRES_OK(ctx, WeightsStep(ctx, team, g.part, static_cast<uint64_t>(g.group_key)));
    // The result may overwrite the gradient when nobody else holds it (the usual case
    // inside a training step): no fresh allocation, and the core reduces in place;
    // else the result takes memory reused across calls (result_memory.cc).
    Tensor *output = nullptr;
    OP_REQUIRES_OK(ctx, ForwardOrAllocateResult(ctx, 0, 0, &output));
    if (RunsHere(team, input)) {
      Reduce(ctx, team, input, output);
      token->scalar<int64_t>()() = 0;  // nothing in flight: Wait finishes at once
      return;
    }
    auto completion = std::make_shared<Completion>();
    completion->team = team;
    completion->team_id = g.team_id;
    completion->key = g.group_key;
    completion->index = index_;
    completion->input = input;
    completion->buffer = *output;
    const int64_t id = AddToken(completion);
    char err[256] = "";
    int rc = mlc_team_group_arrive_part(
        team, g.group_key, static_cast<int>(g.counts.size()), g.counts.data(), Digests(g.shapes),
        Digests(g.labels), CoreDtype(input.dtype()), g.Op(), g.part.part, g.part.nparts, g.part.call_dtypes, index_,
        StepOf(ctx), input.tensor_data().data(), const_cast<char *>(output->tensor_data().data()),
        CompleteTensor, CoreUser(id), err, sizeof err);
    if (rc != MLC_OK) {
      DropToken(id);
      ctx->SetStatus(CoreError(rc, absl::StrCat("ml_comm: ", err)));
      return;
    }
    token->scalar<int64_t>()() = id;
    // Registered with the step: a step that fails cancels the group it left open.
    tensorflow::CancellationManager *cm = ctx->cancellation_manager();
    if (cm == nullptr) return;
    const tensorflow::CancellationToken ct = cm->get_cancellation_token();
    {
      std::lock_guard<std::mutex> lock(completion->mutex);
      completion->cancellation = cm;
      completion->cancel_token = ct;
    }
    if (!cm->RegisterCallback(ct, [id] { CancelToken(id); })) CancelToken(id);  // failing already
  }

 private:
  bool RunsHere(mlc_team *team, const Tensor &input) const {
    return ReducedBySubmit(team, group_.counts, input.dtype());
  }

  void Reduce(OpKernelContext *ctx, mlc_team *team, const Tensor &input, Tensor *output) const {
    const char *in = input.tensor_data().data();
    char *out = const_cast<char *>(output->tensor_data().data());
    const uint64_t label = group_.labels.empty() ? 0 : static_cast<uint64_t>(group_.labels[index_]);
    mlc_tensor tensor = {out, in == out ? nullptr : in, input.NumElements(), ShapeDigest(input), label};
    char err[256] = "";
    int rc = mlc_team_allreduce_part(team, &tensor, 1, CoreDtype(input.dtype()), group_.Op(),
                                     group_.part.part, group_.part.nparts, group_.part.call_dtypes,
                                     err, sizeof err);
    if (rc != MLC_OK)
      ctx->SetStatus(CoreError(rc, absl::StrCat("ml_comm allreduce failed: ", err)));
  }

  GroupAttrs group_;
  int index_ = 0;
};

REGISTER_KERNEL_BUILDER(Name("MlCommGroupSubmit").Device(tensorflow::DEVICE_CPU), GroupSubmitOp);

REGISTER_OP("MlCommGroupWait")
    .Input("buffer: T")
    .Input("token: int64")
    .Output("reduced: T")
    .Attr(ReducedTypeAttr())
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::UnchangedShape)
    .Doc("The result of an MlCommGroupSubmit, once the reduction has filled its buffer.");

class GroupWaitOp : public AsyncOpKernel {
 public:
  explicit GroupWaitOp(OpKernelConstruction *c) : AsyncOpKernel(c) {}

  void ComputeAsync(OpKernelContext *ctx, DoneCallback done) override {
    ctx->set_output(0, ctx->input(0));
    const int64_t id = ctx->input(1).scalar<int64_t>()();
    if (id == 0) {  // one rank, or reduced by the submit itself: nothing in flight
      done();
      return;
    }
    std::shared_ptr<Completion> c = FindToken(id);
    OP_REQUIRES_ASYNC(ctx, c != nullptr,
                      Carrying(tensorflow::errors::Cancelled("ml_comm: this reduction was "
                                                             "cancelled with the step that "
                                                             "submitted it"),
                               MLC_ERR_STATE),
                      done);
    std::unique_lock<std::mutex> lock(c->mutex);
    // The step reached its Wait: the tensor needs no cancellation from now on
    // (the step's end would run it otherwise).
    if (c->cancellation) c->cancellation->TryDeregisterCallback(c->cancel_token);
    if (!c->finished) {  // CompleteTensor will call done
      c->waiter_ctx = ctx;
      c->waiter = std::move(done);
      return;
    }
    const int status = c->status;
    const std::string message = c->message;
    lock.unlock();
    DropToken(id);
    FinishWait(ctx, status, message, std::move(done));
  }
};

REGISTER_KERNEL_BUILDER(Name("MlCommGroupWait").Device(tensorflow::DEVICE_CPU), GroupWaitOp);

tensorflow::Status ml_comm_tf::ListTensors(OpKernelContext *ctx, const char *out_name, bool copy_inputs,
                               std::vector<mlc_tensor> *tensors, DataType *dtype) {
  OpInputList inputs;
  TF_RETURN_IF_ERROR(ctx->input_list("tensors", &inputs));
  int in_start = 0, in_stop = 0, out_start = 0, out_stop = 0;
  TF_RETURN_IF_ERROR(ctx->op_kernel().InputRange("tensors", &in_start, &in_stop));
  TF_RETURN_IF_ERROR(ctx->op_kernel().OutputRange(out_name, &out_start, &out_stop));
  tensors->resize(inputs.size());
  for (int i = 0; i < inputs.size(); ++i) {
    // An input nobody else holds becomes its output (reduced in place); else reused memory.
    Tensor *out = nullptr;
    TF_RETURN_IF_ERROR(ForwardOrAllocateResult(ctx, in_start + i, out_start + i, &out));
    auto bytes = inputs[i].tensor_data();
    char *dst = const_cast<char *>(out->tensor_data().data());
    if (copy_inputs && bytes.size() && dst != bytes.data()) std::memcpy(dst, bytes.data(), bytes.size());
    (*tensors)[i].data = dst;
    (*tensors)[i].source = copy_inputs ? nullptr : bytes.data();
    (*tensors)[i].count = inputs[i].NumElements();
    (*tensors)[i].shape = ShapeDigest(inputs[i]);
  }
  *dtype = inputs[0].dtype();
  return absl::OkStatus();
}

namespace {

template <typename T>
void AddInto(Tensor *out, const Tensor &in) {
  auto o = out->flat<T>();
  o = o + in.flat<T>();
}

void Add(Tensor *out, const Tensor &in) {
  ForEachDtype([&](auto row) {  // the ops' type constraint admits no other dtype
    using Element = typename decltype(row)::type;
    if constexpr (!std::is_same_v<Element, bool>)  // never reduced
      if (out->dtype() == row.tf) AddInto<Element>(out, in);
  });
}

// A list reduction in flight, and what to add to its outputs once it is done.
struct ListPending {
  Pending pending;
  std::vector<Tensor> outputs, add;
};

void FinishList(void *user, int status) {
  auto *d = static_cast<ListPending *>(user);
  if (status == MLC_OK)
    for (size_t i = 0; i < d->add.size(); ++i) Add(&d->outputs[i], d->add[i]);
  Pending *p = new Pending(std::move(d->pending));
  delete d;
  FinishPending(p, status);
}

}  // namespace

void ml_comm_tf::AllreduceList(OpKernelContext *ctx, mlc_team *team, int op, const CallPart &part,
                               std::vector<Tensor> add, AsyncOpKernel::DoneCallback done,
                               const std::vector<int64_t> &labels) {
  std::vector<mlc_tensor> tensors;
  DataType dtype;
  OP_REQUIRES_OK_ASYNC(ctx, ListTensors(ctx, "reduced", false, &tensors, &dtype), done);
  OP_REQUIRES_ASYNC(ctx, labels.empty() || labels.size() == tensors.size(),
                    tensorflow::errors::InvalidArgument("labels: one per tensor, or none"), done);
  for (size_t i = 0; i < labels.size(); ++i) tensors[i].label = static_cast<uint64_t>(labels[i]);
  auto *d = new ListPending{Pending{team, ctx, std::move(done), "allreduce"}, {}, std::move(add)};
  for (int i = 0; i < ctx->num_outputs(); ++i) d->outputs.push_back(*ctx->mutable_output(i));
  // nparts 0: a call of gradients with none to average (every entry None), which TensorFlow
  // gives one empty placeholder; the core gets a request of no tensors, which every rank
  // must make too, so that a rank whose list held only None fails with the others.
  const bool empty_call = part.nparts == 0;
  int rc = mlc_team_allreduce_async_at(
      team, tensors.data(), empty_call ? 0 : static_cast<int>(tensors.size()), CoreDtype(dtype), op,
      part.part, empty_call ? 1 : part.nparts, part.call_dtypes, part.step, part.index, FinishList, d, nullptr);
  if (rc != MLC_OK) FinishList(d, rc);
}

REGISTER_OP("MlCommAllreduceN")
    .ML_COMM_LIST_OP("reduced", ReducedTypeAttr())
    .Input("labels: int64")
    .Attr("average: bool = true")
    .ML_COMM_CALL_PART_ATTRS
    .Doc(R"doc(
Sum or average a list of tensors of one dtype over all ranks, fused into one reduction.
labels: each tensor's mlc_tensor.label, or none (an input, not an attribute: an eager
kernel is cached per attribute value, and a label per call would grow that cache).
)doc");

class AllreduceNOp : public TeamKernel {
 public:
  explicit AllreduceNOp(OpKernelConstruction *c) : TeamKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("average", &average_));
    OP_REQUIRES_OK(c, ReadCallPart(c, &part_));
  }

  void Start(OpKernelContext *ctx, mlc_team *team, DoneCallback done) override {
    OP_REQUIRES_OK_ASYNC(ctx, ListWeightsStep(ctx, team, part_), done);
    const auto labels = ctx->input(ctx->num_inputs() - 1).flat<int64_t>();
    AllreduceList(ctx, team, average_ ? MLC_OP_AVERAGE : MLC_OP_SUM, part_, {}, std::move(done),
                  std::vector<int64_t>(labels.data(), labels.data() + labels.size()));
  }

 private:
  bool average_ = true;
  CallPart part_;
};

REGISTER_KERNEL_BUILDER(Name("MlCommAllreduceN").Device(tensorflow::DEVICE_CPU), AllreduceNOp);

REGISTER_OP("MlCommBroadcastN")
    .ML_COMM_LIST_OP("broadcast", TypeAttr())
    .Attr("root: int")
    .Doc("Every rank receives root's values of the tensors.");

class BroadcastNOp : public TeamKernel {
 public:
  explicit BroadcastNOp(OpKernelConstruction *c) : TeamKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("root", &root_));
  }

  void Start(OpKernelContext *ctx, mlc_team *team, DoneCallback done) override {
    std::vector<mlc_tensor> tensors;
    DataType dtype;
    // In place: the root's outputs must hold its own values before they are sent.
    OP_REQUIRES_OK_ASYNC(ctx, ListTensors(ctx, "broadcast", true, &tensors, &dtype), done);
    auto *pending = new Pending{team, ctx, std::move(done), "broadcast"};
    int rc = mlc_team_broadcast_async(team, tensors.data(), static_cast<int>(tensors.size()),
                                      CoreDtype(dtype), root_, FinishPending, pending,
                                      nullptr);
    if (rc != MLC_OK) FinishPending(pending, rc);
  }

 private:
  int root_ = 0;
};

REGISTER_KERNEL_BUILDER(Name("MlCommBroadcastN").Device(tensorflow::DEVICE_CPU), BroadcastNOp);

// Called by the Python layer (ctypes) at init and finalize: the session's live teams.
extern "C" void mlc_tf_set_live_teams(const int64_t *ids, const uintptr_t *handles, int n) {
  {
    std::lock_guard<std::mutex> lock(live_mutex);
    live_teams.clear();
    for (int i = 0; i < n; ++i) live_teams[ids[i]] = handles[i];
  }
  ForgetPipelines(std::vector<int64_t>(ids, ids + n));
}
