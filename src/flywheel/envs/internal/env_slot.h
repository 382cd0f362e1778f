// EnvSlot: one env of an EnvPool with what the pool adds to it, the time
// limit (Gymnasium's TimeLimit) and autoreset, and Advance(), which takes one
// pool step of it (a step, or the reset that follows an ended episode) and
// writes the result row. The semantics are docs/envs.md's "Autoreset":
//
//   kNextStep (rows without final_obs): the step that ends an episode (a
//     terminal state or the time limit) reports it; the env's next Advance()
//     resets it, ignores the action and reports reward 0, no flags.
//   kSameStep (rows with final_obs): the ending step itself resets the env:
//     obs gets the new episode's first observation, final_obs the terminal
//     one (has_final_obs = true); final_obs is zeroed on every other step.
//
// Thread-safety: a slot is used by one thread at a time (EnvPool hands it
// over with Send's release store and the claim's acquire). One cache line
// each, so threads stepping neighbouring envs do not share lines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "absl/base/attributes.h"
#include "flywheel/base/status.h"
#include "flywheel/envs/env.h"
#include "flywheel/envs/env_pool.h"
#include "flywheel/envs/internal/action_slots.h"
#include "flywheel/envs/internal/buffer_arena.h"
#include "flywheel/envs/internal/cache_line.h"

namespace flywheel::internal_envs {

struct alignas(kCacheLine) EnvSlot {
  std::unique_ptr<envs::Env> env;
  size_t obs_bytes = 0;      // bytes of one observation row (the pool's)
  int64_t max_steps = 0;     // time limit; 0 = none
  int64_t elapsed = 0;       // steps since the episode began
  bool needs_reset = false;  // kNextStep: the last step ended the episode

  // Takes one pool step and writes its result to row `row` of `v`: obs,
  // reward, terminated, truncated and, with kSameStep (v.final_obs set),
  // final_obs and has_final_obs (see above); env_id is the caller's. The
  // action is slot `e` of `actions` (read only when the env steps, not when
  // it resets). Returns the env's Reset or Step error; after one the slot's
  // state is unspecified (EnvPool fails the pool).
  //
  // Always inlined: EnvPool calls it from one place, once per env step, and
  // GCC left it out of line there at ~20 more instructions per step.
  ABSL_ATTRIBUTE_ALWAYS_INLINE Status Advance(const ActionSlots& actions, int32_t e,
                                              const envs::BufferView& v, int row) {
    void* obs = RowAt(v.obs, row, obs_bytes);
    double reward = 0;
    bool terminated = false, truncated = false, final = false;
    Status st;
    if (needs_reset) [[unlikely]] {  // once per episode
      st = env->Reset({}, obs);
      elapsed = 0;
      needs_reset = false;
    } else {
      envs::StepResult r;
      int64_t discrete = 0;
      st = env->Step(actions.Load(e, &discrete), obs, &r);
      ++elapsed;
      reward = r.reward;
      terminated = r.terminated;
      truncated = max_steps > 0 && elapsed >= max_steps;
      if (st.ok() && (terminated || truncated)) {
        if (v.final_obs != nullptr) {
          std::memcpy(RowAt(v.final_obs, row, obs_bytes), obs, obs_bytes);
          final = true;
          st = env->Reset({}, obs);
          elapsed = 0;
        } else {
          needs_reset = true;
        }
      }
    }
    if (v.final_obs != nullptr) {
      if (!final) std::memset(RowAt(v.final_obs, row, obs_bytes), 0, obs_bytes);
      v.has_final_obs[row] = final;
    }
    v.reward[row] = reward;
    v.terminated[row] = terminated;
    v.truncated[row] = truncated;
    return st;
  }
};

}  // namespace flywheel::internal_envs
