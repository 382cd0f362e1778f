#include "flywheel/envs/registry.h"

#include "absl/strings/str_cat.h"
#include "flywheel/envs/classic_control/classic_control.h"

namespace flywheel::envs {

const std::vector<EnvSpec>& RegisteredEnvs() {
  static const auto* specs = new std::vector<EnvSpec>{
      {"CartPole-v1", 500,
       "gravity=9.8, masscart=1.0, masspole=0.1, length=0.5, force_mag=10.0, tau=0.02",
       NewCartPole},
      {"Acrobot-v1", 500, "", NewAcrobot},
      {"MountainCar-v0", 200, "goal_velocity=0, force=0.001, gravity=0.0025", NewMountainCar},
      {"MountainCarContinuous-v0", 999, "goal_velocity=0, power=0.0015", NewMountainCarContinuous},
      {"Pendulum-v1", 200, "g=10.0, m=1.0, l=1.0", NewPendulum},
  };
  return *specs;
}

Result<const EnvSpec*> FindEnv(std::string_view id) {
  std::string known;
  for (const auto& spec : RegisteredEnvs()) {
    if (spec.id == id) return &spec;
    absl::StrAppend(&known, known.empty() ? "" : ", ", spec.id);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown environment '", AsAbsl(id), "' (known: ", known, ")"));
}

Result<std::unique_ptr<Env>> MakeEnv(std::string_view id, const EnvKwargs& kwargs) {
  FW_ASSIGN_OR_RETURN(const EnvSpec* spec, FindEnv(id));
  return spec->make(kwargs);
}

}  // namespace flywheel::envs
