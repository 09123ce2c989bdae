#include "engine/runner.h"

#include "engine/hiergen.h"
#include "engine/model.h"
#include "engine/recgen.h"
#include "engine/vanilla.h"

namespace photon {

Runner::Runner(const Model& model) : model_(model), ws_(model.backend()) {}

std::unique_ptr<Runner> make_runner(Mode mode, const Model& model) {
  switch (mode) {
    case Mode::HierGen: return make_hiergen_runner(model);
    case Mode::RecGen: return make_recgen_runner(model);
    case Mode::Vanilla: return make_vanilla_runner(model);
  }
  fail(PHOTON_ERR_INTERNAL, "make_runner: unknown mode");
}

}  // namespace photon
