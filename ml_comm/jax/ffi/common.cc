// The live teams and the helpers of common.h.
#include "common.h"

#include <mutex>
#include <unordered_map>

namespace ffi = xla::ffi;

namespace mlc_jax {
namespace {
std::mutex live_mutex;
std::unordered_map<int64_t, uintptr_t> live_teams;
}  // namespace

HeldTeam::HeldTeam(int64_t id) {
  std::lock_guard<std::mutex> lock(live_mutex);  // finalize unregisters before it destroys
  auto found = live_teams.find(id);
  if (found == live_teams.end()) return;
  mlc_team *team = reinterpret_cast<mlc_team *>(found->second);
  if (mlc_team_acquire(team) == MLC_OK) team_ = team;
}

HeldTeam::~HeldTeam() {
  if (team_) mlc_team_release(team_);
}

int CoreDtype(ffi::DataType type) {
  switch (type) {
    case ffi::DataType::F32: return MLC_FLOAT32;
    case ffi::DataType::F64: return MLC_FLOAT64;
    case ffi::DataType::F16: return MLC_FLOAT16;
    case ffi::DataType::BF16: return MLC_BFLOAT16;
    case ffi::DataType::S32: return MLC_INT32;
    case ffi::DataType::S64: return MLC_INT64;
    default: return -1;
  }
}

ffi::Error Failure(int status, const std::string &text) {
  std::string message = "ml_comm (status " + std::to_string(status) + ", " +
                        mlc_status_name(status) + "): " + text;
  auto code = status == MLC_ERR_MISMATCH ? ffi::ErrorCode::kFailedPrecondition
                                         : ffi::ErrorCode::kInternal;
  return ffi::Error(code, message);
}

ffi::Error StaleStep() {
  return Failure(MLC_ERR_STATE,
                 "gradients failed: this compiled step belongs to ml_comm teams that no "
                 "longer exist (finalize ran since it was traced); trace it again after "
                 "ml_comm's init");
}

}  // namespace mlc_jax

// The teams whose calls may run (init), or none (finalize): ids[i] names handles[i].
// The open steps of the teams that go end first, while their teams still exist.
extern "C" void mlc_jax_set_live_teams(const int64_t *ids, const uintptr_t *handles, int n) {
  mlc_jax::CloseSteps();
  std::lock_guard<std::mutex> lock(mlc_jax::live_mutex);
  mlc_jax::live_teams.clear();
  for (int i = 0; i < n; ++i) mlc_jax::live_teams[ids[i]] = handles[i];
}
