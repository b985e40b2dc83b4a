// TensorFlow ops for the core's collectives beyond the average:
//   MlCommAllreduceOp   out-of-place allreduce with any op (sum, average, min, max,
//                       product), asynchronous like MlCommAllreduceN
//   MlCommAllgather     rows of every rank, the first dimension may differ by rank
//   MlCommReducescatter the rows reduced, this rank's share of them
//   MlCommAlltoall      rows sent in splits, one per rank; the splits received too
// The core's collectives of rows are blocking calls (the sizes are exchanged before
// the output can be allocated), so their kernels run them on a thread of their own
// and call done() from there: no TensorFlow thread waits for the other ranks.
// Ops are ordered across ranks by the Python layer (control dependencies).

#include <cstring>
#include <memory>
#include <thread>

#include "common.h"

using namespace ml_comm_tf;

namespace {

using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

// The input's shape with an unknown first dimension. A 0-d input passes here: the
// core fails the op on every rank, naming this one (MLC_ROWS_NONE), where an error at
// graph building would leave the other ranks waiting in theirs.
tensorflow::Status RowsShape(InferenceContext *c) {
  ShapeHandle in = c->input(0), out;
  if (c->RankKnown(in) && c->Rank(in) == 0) {
    c->set_output(0, c->UnknownShape());
    return absl::OkStatus();
  }
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(in, 1, &in));
  TF_RETURN_IF_ERROR(c->ReplaceDim(in, 0, c->UnknownDim(), &out));
  c->set_output(0, out);
  return absl::OkStatus();
}

// The dimensions after the first: the rows' shape, which the ranks compare.
std::vector<int64_t> RowShape(const Tensor &t) {
  std::vector<int64_t> shape;
  for (int d = 1; d < t.dims(); ++d) shape.push_back(t.dim_size(d));
  return shape;
}

// The rows and the rows' number of dimensions as the core takes them: a 0-d tensor has
// no rows (MLC_ROWS_NONE), which the core fails on every rank.
int64_t RowCount(const Tensor &t) { return t.dims() == 0 ? 0 : t.dim_size(0); }
int RowNdim(const Tensor &t) { return t.dims() == 0 ? MLC_ROWS_NONE : t.dims() - 1; }

tensorflow::TensorShape WithRows(const Tensor &t, int64_t rows) {
  tensorflow::TensorShape shape = t.shape();
  shape.set_dim(0, rows);
  return shape;
}

void *Data(const Tensor &t) { return const_cast<char *>(t.tensor_data().data()); }

// A kernel whose blocking core calls run on a thread of their own.
class RowsKernel : public AsyncOpKernel {
 public:
  explicit RowsKernel(OpKernelConstruction *c, const char *what) : AsyncOpKernel(c), what_(what) {
    OP_REQUIRES_OK(c, c->GetAttr("team_id", &team_id_));
  }

  void ComputeAsync(OpKernelContext *ctx, DoneCallback done) override {
    // Held until the thread is done with it, so that finalize() waits for the call.
    mlc_team *team = AcquireLive(team_id_);
    OP_REQUIRES_ASYNC(ctx, team != nullptr,
                      Carrying(tensorflow::errors::FailedPrecondition(
                                   "ml_comm: this op's team no longer exists or is being "
                                   "finalized; build the graph again after ml_comm.init()"),
                               MLC_ERR_STATE),
                      done);
    std::thread([this, ctx, team, done = std::move(done)]() {
      std::string err(512, '\0');
      int rc = Run(ctx, team, &err[0], err.size());
      mlc_team_release(team);
      if (rc != MLC_OK && ctx->status().ok())  // else Allocate's failure is set already
        ctx->SetStatus(CoreError(rc, absl::StrCat("ml_comm ", what_, " failed: ", err.c_str())));
      done();
    }).detach();
  }

 protected:
  // The core's calls; outputs allocated as soon as their sizes are known.
  virtual int Run(OpKernelContext *ctx, mlc_team *team, char *err, size_t errlen) = 0;

  // ctx's status set (and MLC_ERR_NOMEM returned) when the allocation failed.
  static int Allocate(OpKernelContext *ctx, int index, const tensorflow::TensorShape &shape,
                      Tensor **out) {
    auto status = ctx->allocate_output(index, shape, out);
    if (status.ok()) return MLC_OK;
    ctx->SetStatus(status);
    return MLC_ERR_NOMEM;
  }

 private:
  const char *what_;
  int64_t team_id_ = 0;
};

}  // namespace

REGISTER_OP("MlCommAllreduceOp")
    .ML_COMM_LIST_OP("reduced", ReducedTypeAttr())
    .Attr("op: int")
    .Doc("Reduce a list of tensors of one dtype over all ranks with op (MLC_OP_*).");

class AllreduceOpOp : public TeamKernel {
 public:
  explicit AllreduceOpOp(OpKernelConstruction *c) : TeamKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("op", &op_));
    OP_REQUIRES(c, op_ >= 0 && op_ < MLC_NUM_OPS,
                Carrying(tensorflow::errors::InvalidArgument("ml_comm: unknown reduction op ", op_),
                         MLC_ERR_ARG));
  }

  void Start(OpKernelContext *ctx, mlc_team *team, DoneCallback done) override {
    AllreduceList(ctx, team, op_, CallPart{}, {}, std::move(done));
  }

 private:
  int op_ = MLC_OP_SUM;
};

REGISTER_KERNEL_BUILDER(Name("MlCommAllreduceOp").Device(tensorflow::DEVICE_CPU), AllreduceOpOp);

REGISTER_OP("MlCommAllgather")
    .Input("tensor: T")
    .Output("gathered: T")
    .Attr(TypeAttr())
    .Attr("team_id: int")
    .SetIsStateful()
    .SetShapeFn(RowsShape)
    .Doc("Every rank's rows, in rank order; the first dimension may differ by rank.");

class AllgatherOp : public RowsKernel {
 public:
  explicit AllgatherOp(OpKernelConstruction *c) : RowsKernel(c, "allgather") {}

 protected:
  int Run(OpKernelContext *ctx, mlc_team *team, char *err, size_t errlen) override {
    const Tensor &in = ctx->input(0);
    const int dtype = CoreDtype(in.dtype()), size = mlc_team_size(team);
    const std::vector<int64_t> row = RowShape(in);
    std::vector<int64_t> rows(size);
    std::unique_ptr<char[]> carried(new char[MLC_ROWS_CARRY_BYTES]);
    int carried_done = 0;
    int rc = mlc_team_allgather_rows(team, RowCount(in), RowNdim(in), row.data(), dtype, Data(in),
                                     carried.get(), &carried_done, rows.data(), err, errlen);
    if (rc) return rc;
    int64_t total = 0;
    for (int64_t r : rows) total += r;
    Tensor *out = nullptr;
    if (carried_done) {  // the rows came with the counts: every rank is done
      if ((rc = Allocate(ctx, 0, WithRows(in, total), &out))) return rc;
      if (out->TotalBytes() > 0) std::memcpy(Data(*out), carried.get(), out->TotalBytes());
      return MLC_OK;
    }
    if ((rc = Allocate(ctx, 0, WithRows(in, total), &out))) {
      // The data moves without a check of its own: relay the others' rows, keep none.
      mlc_team_allgatherv(team, Data(in), nullptr, rows.data(), row.size(), row.data(), dtype,
                          err, errlen);
      return rc;
    }
    return mlc_team_allgatherv(team, Data(in), Data(*out), rows.data(), row.size(), row.data(),
                               dtype, err, errlen);
  }
};

REGISTER_KERNEL_BUILDER(Name("MlCommAllgather").Device(tensorflow::DEVICE_CPU), AllgatherOp);

REGISTER_OP("MlCommReducescatter")
    .Input("tensor: T")
    .Output("reduced: T")
    .Attr(ReducedTypeAttr())
    .Attr("team_id: int")
    .Attr("op: int")
    .SetIsStateful()
    .SetShapeFn(RowsShape)
    .Doc("The rows reduced over all ranks with op; this rank's share of them (rows / size, "
         "one more on the first rows % size ranks).");

class ReducescatterOp : public RowsKernel {
 public:
  explicit ReducescatterOp(OpKernelConstruction *c) : RowsKernel(c, "reducescatter") {
    OP_REQUIRES_OK(c, c->GetAttr("op", &op_));
  }

 protected:
  int Run(OpKernelContext *ctx, mlc_team *team, char *err, size_t errlen) override {
    const Tensor &in = ctx->input(0);
    const int64_t rows = RowCount(in);
    const std::vector<int64_t> row = RowShape(in);
    Tensor *out = nullptr;
    if (in.dims() > 0) {  // a 0-d input has no output: the core fails the op everywhere
      int64_t share = mlc_rows_share(rows, mlc_team_size(team), mlc_team_rank(team));
      int rc = Allocate(ctx, 0, WithRows(in, share), &out);
      if (rc) return rc;
    }
    return mlc_team_reducescatter(team, Data(in), out ? Data(*out) : nullptr, rows, RowNdim(in),
                                  row.data(), CoreDtype(in.dtype()), op_, err, errlen);
  }

 private:
  int op_ = MLC_OP_AVERAGE;
};

REGISTER_KERNEL_BUILDER(Name("MlCommReducescatter").Device(tensorflow::DEVICE_CPU), ReducescatterOp);

REGISTER_OP("MlCommAlltoall")
    .Input("tensor: T")
    .Input("splits: int64")
    .Output("received: T")
    .Output("received_splits: int64")
    .Attr(TypeAttr())
    .Attr("team_id: int")
    .Attr("evenly: bool = false")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext *c) {
      TF_RETURN_IF_ERROR(RowsShape(c));
      c->set_output(1, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    })
    .Doc("splits[d] rows go to rank d (evenly: splits is ignored, rows / size to each); "
         "returns the rows received in rank order and how many came from each rank. Splits "
         "that are wrong on any rank fail the op on every rank.");

class AlltoallOp : public RowsKernel {
 public:
  explicit AlltoallOp(OpKernelConstruction *c) : RowsKernel(c, "alltoall") {
    OP_REQUIRES_OK(c, c->GetAttr("evenly", &evenly_));
  }

 protected:
  // The splits are checked by the core, so that every rank fails together.
  int Run(OpKernelContext *ctx, mlc_team *team, char *err, size_t errlen) override {
    const Tensor &in = ctx->input(0), &splits = ctx->input(1);
    const int size = mlc_team_size(team);
    const std::vector<int64_t> row = RowShape(in);
    const int64_t *given = evenly_ ? nullptr : splits.flat<int64_t>().data();
    const int nsplits = splits.dims() == 1 ? static_cast<int>(splits.NumElements()) : -1;
    const int dtype = CoreDtype(in.dtype());
    std::vector<int64_t> send(size);
    Tensor *received = nullptr, *out = nullptr;
    int rc = Allocate(ctx, 1, tensorflow::TensorShape({size}), &received);
    if (rc) return rc;
    int64_t *recv = received->flat<int64_t>().data();
    if ((rc = mlc_team_alltoall_splits(team, given, nsplits, RowCount(in), RowNdim(in), row.data(),
                                       dtype, send.data(), recv, err, errlen)))
      return rc;
    int64_t total = 0;
    for (int s = 0; s < size; ++s) total += recv[s];
    if ((rc = Allocate(ctx, 0, WithRows(in, total), &out))) return rc;
    return mlc_team_alltoallv(team, Data(in), send.data(), Data(*out), recv, row.size(), row.data(),
                              dtype, err, errlen);
  }

 private:
  bool evenly_ = false;
};

REGISTER_KERNEL_BUILDER(Name("MlCommAlltoall").Device(tensorflow::DEVICE_CPU), AlltoallOp);
