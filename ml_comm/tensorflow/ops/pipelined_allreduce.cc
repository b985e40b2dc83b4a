// MlCommPipelinedAllreduceN: gradients() on a pipelined team (config_team with
// ksteps < max_steps). Each call finds its pipeline, keyed by team, dtype and the
// tensors' element counts (so a retraced graph continues the same one); the core's
// pipelined step (mlc_pipeline_next, csrc/pipeline/pipeline.c) says what the call does,
// and this op moves the tensors: it finishes the previous call's reduction (its staging
// tensors), reduces the inputs now, or starts their reduction on new staging tensors, and
// returns what the turn says (this call's average, zeros, the previous average, or both).
// Where the previous call's reduction failed, the call fails with that error, as on every
// rank: having done its own part where its step is counted (an average reduced now is
// kept for the next call, as a reduction started is), else starting nothing (the turn's
// restart_on_failure). `step` is the number of the training step the call runs in
// (ml_comm counts Keras's steps; 0: not counted): its requests carry it, so that a rank
// whose step failed before this op ran is found behind at its next step instead of
// pairing its next step's gradients with the others' current ones.
// No thread blocks: when the previous call's reduction is still running, the rest of the
// call runs from that reduction's completion callback. The staging tensors of a call are
// handed out as the next call's outputs, so nothing is copied back.

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <tuple>

#include "common.h"

namespace ml_comm_tf {
namespace {

struct Pipeline {
  std::mutex mutex;
  mlc_pipeline state{};           // the core's: what each call does (its handle: this)
  bool configured = false;
  std::vector<Tensor> staging;    // averaged in place by the request in flight
  bool running = false;           // that request has not finished yet
  int status = MLC_OK;            // how it finished
  std::function<void()> resume;   // the call waiting for it
  std::condition_variable idle;   // notified when running turns false
};

using PipelineKey = std::tuple<int64_t, int, std::vector<int64_t>>;
std::mutex pipelines_mutex;
std::map<PipelineKey, std::shared_ptr<Pipeline>> pipelines;

std::shared_ptr<Pipeline> FindPipeline(const PipelineKey &key) {
  std::lock_guard<std::mutex> lock(pipelines_mutex);
  auto &slot = pipelines[key];
  if (!slot) slot = std::make_shared<Pipeline>();
  return slot;
}

void StagingDone(void *user, int status) {
  auto *owner = static_cast<std::shared_ptr<Pipeline> *>(user);
  std::shared_ptr<Pipeline> p = std::move(*owner);
  delete owner;
  std::unique_lock<std::mutex> lock(p->mutex);
  p->running = false;
  p->status = status;
  std::function<void()> resume = std::move(p->resume);
  p->resume = nullptr;
  lock.unlock();
  p->idle.notify_all();
  if (resume) resume();
}

}  // namespace

REGISTER_OP("MlCommPipelinedAllreduceN")
    .ML_COMM_LIST_OP("reduced", ReducedTypeAttr())
    .Input("step: int64")
    .Attr("ksteps: int")
    .Attr("max_steps: int")
    .Attr("average: bool = true")
    .ML_COMM_CALL_PART_ATTRS
    .Doc(R"doc(
Average (or sum) a list over all ranks on a pipelined team: depending on the call
number (config_team ksteps and max_steps), the result is this call's reduction,
the previous call's, zeros (entering the pipeline) or both summed (leaving it).
step: the training step's number (0: steps not counted), which the requests carry.
)doc");

class PipelinedAllreduceNOp : public TeamKernel {
 public:
  explicit PipelinedAllreduceNOp(OpKernelConstruction *c) : TeamKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("ksteps", &ksteps_));
    OP_REQUIRES_OK(c, c->GetAttr("max_steps", &max_steps_));
    OP_REQUIRES_OK(c, c->GetAttr("average", &average_));
    OP_REQUIRES_OK(c, ReadCallPart(c, &part_));
  }

  // The rest of the call, when it runs later, runs on the team's own thread
  // (StagingDone): finalize joins it first, so it needs no hold of the team.
  void Start(OpKernelContext *ctx, mlc_team *team, DoneCallback done) override {
    OP_REQUIRES_OK_ASYNC(ctx, ListWeightsStep(ctx, team, part_), done);  // first
    OpInputList inputs;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->input_list("tensors", &inputs), done);
    std::vector<int64_t> counts;
    for (int i = 0; i < inputs.size(); ++i) counts.push_back(inputs[i].NumElements());
    auto p = FindPipeline(PipelineKey(team_id_, CoreDtype(inputs[0].dtype()), counts));
    std::unique_lock<std::mutex> lock(p->mutex);
    if (!p->configured) {
      mlc_pipeline_init(&p->state, ksteps_, max_steps_);
      p->configured = true;
    }
    const Tensor &step_input = ctx->input(ctx->num_inputs() - 1);
    OP_REQUIRES_ASYNC(ctx, tensorflow::TensorShapeUtils::IsScalar(step_input.shape()),
                      tensorflow::errors::InvalidArgument("step: a scalar"), done);
    const int64_t step = step_input.scalar<int64_t>()();
    const mlc_pipeline_turn turn = mlc_pipeline_next(&p->state, step > 0 ? step : 0);
    CallPart placed = part_;
    placed.step = turn.step;
    placed.index = turn.index;
    if (!turn.finish && turn.reduce_now) {  // nothing in flight to return: this call's average
      lock.unlock();
      AllreduceList(ctx, team, Op(), placed, {}, std::move(done));
      return;
    }
    OP_REQUIRES_ASYNC(ctx, !p->resume,
                      Carrying(tensorflow::errors::FailedPrecondition(
                                   "ml_comm: two calls of one pipelined gradients() ran at "
                                   "once; give each model its own team"),
                               MLC_ERR_STATE),
                      done);
    auto rest = [this, ctx, team, p, turn, placed, done = std::move(done)]() mutable {
      Continue(ctx, team, p, turn, placed, std::move(done));
    };
    if (turn.finish && p->running) {  // StagingDone runs the rest of this call
      p->resume = std::move(rest);
      return;
    }
    lock.unlock();
    rest();
  }

 private:
  // The previous call's reduction has finished (or there was none).
  void Continue(OpKernelContext *ctx, mlc_team *team, std::shared_ptr<Pipeline> p,
                mlc_pipeline_turn turn, const CallPart &placed, DoneCallback done) {
    std::vector<Tensor> previous;
    int previous_status = MLC_OK;
    if (turn.finish) {
      std::lock_guard<std::mutex> lock(p->mutex);  // StagingDone writes them on another thread
      previous = std::move(p->staging);
      p->staging.clear();
      // The failure is this call's to report, once: at once where the pipeline restarts
      // (the next call finds no reduction and enters it afresh), else after its own part.
      previous_status = p->status;
      p->status = MLC_OK;
    }
    OP_REQUIRES_ASYNC(ctx, previous_status == MLC_OK || !turn.restart_on_failure,
                      CoreError(previous_status,
                                absl::StrCat("ml_comm pipelined allreduce failed: ",
                                             Failure(team, previous_status))),
                      done);
    if (previous_status != MLC_OK) {
      previous.clear();
      const absl::Status failed = CoreError(
          previous_status, absl::StrCat("ml_comm pipelined allreduce failed: ", Failure(team, previous_status)));
      const bool hand_over = turn.reduce_now;
      done = [ctx, p, hand_over, failed, done = std::move(done)]() {
        if (hand_over && ctx->status().ok()) {  // this call's average, for the next call to return
          std::vector<Tensor> now;
          for (int i = 0; i < ctx->num_outputs(); ++i) now.push_back(*ctx->mutable_output(i));
          std::lock_guard<std::mutex> lock(p->mutex);
          p->staging = std::move(now);
          p->status = MLC_OK;
          mlc_pipeline_started(&p->state, p.get());
        }
        ctx->SetStatus(failed);  // the first error stays, where this call's own failed too
        done();
      };
    }
    if (turn.reduce_now) {  // MLC_RESULT_BOTH adds the previous average; NOW has none
      if (turn.result != MLC_RESULT_BOTH) previous.clear();
      AllreduceList(ctx, team, Op(), placed, std::move(previous), std::move(done));
      return;
    }
    OpInputList inputs;
    OpOutputList outputs;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->input_list("tensors", &inputs), done);
    OP_REQUIRES_OK_ASYNC(ctx, ctx->output_list("reduced", &outputs), done);
    std::vector<Tensor> staging(inputs.size());
    std::vector<mlc_tensor> tensors(inputs.size());
    for (int i = 0; i < inputs.size(); ++i) {
      if (turn.result == MLC_RESULT_PREVIOUS && !previous.empty()) {
        outputs.set(i, previous[i]);
      } else {  // entering the pipeline: nothing to return yet
        Tensor *zeros = nullptr;
        OP_REQUIRES_OK_ASYNC(ctx, outputs.allocate(i, inputs[i].shape(), &zeros), done);
        std::memset(const_cast<char *>(zeros->tensor_data().data()), 0, zeros->tensor_data().size());
      }
      OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_temp(inputs[i].dtype(), inputs[i].shape(), &staging[i]),
                           done);
      auto bytes = inputs[i].tensor_data();
      char *dst = const_cast<char *>(staging[i].tensor_data().data());
      if (bytes.size()) std::memcpy(dst, bytes.data(), bytes.size());
      tensors[i] = mlc_tensor{dst, nullptr, inputs[i].NumElements(), ShapeDigest(inputs[i])};
    }
    {
      std::lock_guard<std::mutex> lock(p->mutex);
      p->staging = std::move(staging);
      p->running = true;
      p->status = MLC_OK;
      mlc_pipeline_started(&p->state, p.get());
    }
    auto *owner = new std::shared_ptr<Pipeline>(p);
    int rc = mlc_team_allreduce_async_at(
        team, tensors.data(), static_cast<int>(tensors.size()), CoreDtype(inputs[0].dtype()), Op(),
        placed.part, placed.nparts, placed.call_dtypes, placed.step, placed.index, StagingDone, owner, nullptr);
    if (rc != MLC_OK) {
      StagingDone(owner, rc);
      ctx->SetStatus(
          CoreError(rc, absl::StrCat("ml_comm pipelined allreduce failed: ", Failure(team, rc))));
    }
    done();
  }

  int Op() const { return average_ ? MLC_OP_AVERAGE : MLC_OP_SUM; }

  int64_t ksteps_ = 0, max_steps_ = 0;
  bool average_ = true;
  CallPart part_;
};

REGISTER_KERNEL_BUILDER(Name("MlCommPipelinedAllreduceN").Device(tensorflow::DEVICE_CPU),
                        PipelinedAllreduceNOp);

void ForgetPipelines(const std::vector<int64_t> &live_ids) {
  std::lock_guard<std::mutex> lock(pipelines_mutex);
  for (auto it = pipelines.begin(); it != pipelines.end();) {
    bool live = false;
    for (int64_t id : live_ids) live = live || std::get<0>(it->first) == id;
    it = live ? std::next(it) : pipelines.erase(it);
  }
}

}  // namespace ml_comm_tf

// config_team on a live team: its pipelines start counting calls afresh, once the
// reductions they have in flight have finished (their results are dropped), so
// that the team's counters and queue hold nothing of the old schedule.
extern "C" void mlc_tf_reset_pipelines(int64_t team_id) {
  std::vector<std::shared_ptr<ml_comm_tf::Pipeline>> dropped;
  {
    std::lock_guard<std::mutex> lock(ml_comm_tf::pipelines_mutex);
    for (auto it = ml_comm_tf::pipelines.begin(); it != ml_comm_tf::pipelines.end();) {
      if (std::get<0>(it->first) != team_id) {
        ++it;
        continue;
      }
      dropped.push_back(it->second);
      it = ml_comm_tf::pipelines.erase(it);
    }
  }
  for (auto &p : dropped) {
    std::unique_lock<std::mutex> lock(p->mutex);
    p->idle.wait(lock, [&] { return !p->running; });
  }
}
