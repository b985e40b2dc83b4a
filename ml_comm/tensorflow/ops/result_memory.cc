// Memory for the ops' results when the input cannot become the output.
//
// TensorFlow's default CPU allocator returns a large tensor's pages to the system
// when the tensor dies, so every call's fresh outputs fault again page by page
// (4 KiB each), and peers' shared-memory copies pin those pages one by one: on
// ResNet-50's 214 gradients the op took twice as long (benchmarks/RESULTS.md, Stop
// 10). Results of
// kPooledFromBytes or more come instead from blocks this allocator keeps once their
// tensors are gone, keyed by exact size (a training step asks for the same shapes
// every step); blocks of kHugeFromBytes or more ask for transparent huge pages, as
// NumPy does for its own large arrays. Free blocks are capped at the most bytes
// ever lent at once (the oldest are freed first), so the cache never holds more
// than the most that results ever held.
#include "result_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tensorflow/core/framework/allocator.h"

namespace ml_comm_tf {
namespace {

// ml_comm.h's, as NumPy's pool takes them.
constexpr size_t kPooledFromBytes = MLC_RESULT_POOL_BYTES;
constexpr size_t kHugeFromBytes = MLC_HUGE_FROM_BYTES;
constexpr size_t kHugePageBytes = MLC_HUGE_PAGE_BYTES;
constexpr size_t kPageBytes = 4096;

class ResultAllocator : public tensorflow::Allocator {
 public:
  std::string Name() override { return "ml_comm_results"; }

  void *AllocateRaw(size_t alignment, size_t num_bytes) override {
    const size_t bytes = RoundUp(num_bytes, kPageBytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(bytes);
      if (it != free_.end() && !it->second.empty()) {
        void *ptr = it->second.back();
        it->second.pop_back();
        given_back_.erase(std::find(given_back_.begin(), given_back_.end(), Block{ptr, bytes}));
        free_bytes_ -= bytes;
        Lend(ptr, bytes);
        return ptr;
      }
    }
    const bool huge = bytes >= kHugeFromBytes;
    size_t align = huge ? kHugePageBytes : kPageBytes;
    if (alignment > align) align = alignment;
    void *ptr = nullptr;
    if (posix_memalign(&ptr, align, bytes) != 0) return nullptr;
#ifdef MADV_HUGEPAGE
    if (huge) madvise(ptr, bytes, MADV_HUGEPAGE);  // before the first touch, which faults
#endif
    std::lock_guard<std::mutex> lock(mu_);
    Lend(ptr, bytes);
    return ptr;
  }

  void DeallocateRaw(void *ptr) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = lent_.find(ptr);
    const size_t bytes = it->second;
    lent_.erase(it);
    lent_bytes_ -= bytes;
    free_[bytes].push_back(ptr);
    given_back_.push_back({ptr, bytes});
    free_bytes_ += bytes;
    while (free_bytes_ > most_lent_) {  // the oldest go first: recent sizes come again
      auto [old, old_bytes] = given_back_.front();
      given_back_.pop_front();
      auto &same = free_[old_bytes];
      same.erase(std::find(same.begin(), same.end(), old));
      free_bytes_ -= old_bytes;
      std::free(old);
    }
  }

 private:
  static size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

  void Lend(void *ptr, size_t bytes) {  // holding mu_
    lent_[ptr] = bytes;
    lent_bytes_ += bytes;
    if (lent_bytes_ > most_lent_) most_lent_ = lent_bytes_;
  }

  std::mutex mu_;
  std::unordered_map<void *, size_t> lent_;
  using Block = std::pair<void *, size_t>;
  std::unordered_map<size_t, std::vector<void *>> free_;  // by size, the latest last
  std::deque<Block> given_back_;                           // every free block, oldest first
  size_t lent_bytes_ = 0, free_bytes_ = 0, most_lent_ = 0;
};

// Tensors may outlive every team and the op library's static destructors, so the
// allocator is never destroyed.
ResultAllocator *Results() {
  static ResultAllocator *allocator = new ResultAllocator;
  return allocator;
}

}  // namespace

tensorflow::Status ForwardOrAllocateResult(OpKernelContext *ctx, int input_index, int output_index,
                                           Tensor **out) {
  const Tensor &input = ctx->input(input_index);
  std::unique_ptr<Tensor> forwarded =
      ctx->forward_input(input_index, output_index, input.dtype(), input.shape(),
                         ctx->output_memory_type(output_index), ctx->output_alloc_attr(output_index));
  if (forwarded != nullptr) {
    ctx->set_output(output_index, *forwarded);
  } else if (input.TotalBytes() >= kPooledFromBytes) {
    Tensor result(Results(), input.dtype(), input.shape());
    if (!result.IsInitialized())
      return tensorflow::errors::ResourceExhausted("ml_comm: no memory for a result of ",
                                                   input.TotalBytes(), " bytes");
    ctx->set_output(output_index, result);
  } else {
    return ctx->allocate_output(output_index, input.shape(), out);
  }
  *out = ctx->mutable_output(output_index);
  return absl::OkStatus();
}

}  // namespace ml_comm_tf
