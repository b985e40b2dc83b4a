// What the JAX FFI handlers share: the live teams (a compiled step names its team by
// an id that is never reused, registered at init and dropped at finalize), the core's
// dtype of an XLA element type, and the error that carries the core's status to Python.
#pragma once

#include <cstdint>
#include <string>

#include "xla/ffi/api/ffi.h"

extern "C" {
#include <stddef.h>
#include <stdint.h>
#include "ml_comm.h"
}

namespace mlc_jax {

// The team behind a live id, held (mlc_team_acquire) while a call uses it, so that
// finalize() on another thread waits for the use instead of freeing the team under it.
class HeldTeam {
 public:
  explicit HeldTeam(int64_t id);
  ~HeldTeam();
  HeldTeam(const HeldTeam &) = delete;
  HeldTeam &operator=(const HeldTeam &) = delete;
  mlc_team *get() const { return team_; }

 private:
  mlc_team *team_ = nullptr;
};

// XLA's element types that the core reduces (enum mlc_dtype); -1: none.
int CoreDtype(xla::ffi::DataType type);

// "ml_comm (status 7, ranks disagree on the request): <the core's text>": Python finds
// the status again in the framework's error (ml_comm/keras/backend/errors.py).
xla::ffi::Error Failure(int status, const std::string &text);

// The error of a call whose compiled step outlived its teams.
xla::ffi::Error StaleStep();

// overlap.cc: end every team's open step (finalize, before the teams go).
void CloseSteps();

}  // namespace mlc_jax
