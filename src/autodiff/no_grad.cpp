// no_grad shares the pause counter of the internal NoRecordScope, which is
// what autodiff::is_recording() — the check every op makes — already reads.
#include "mixgrad/autodiff/no_grad.hpp"

#include "hooks/op_hooks.hpp"

namespace mixgrad::autodiff {

no_grad::no_grad() { ++detail::recording_paused(); }
no_grad::~no_grad() { --detail::recording_paused(); }

bool is_grad_enabled() { return detail::recording_paused() == 0; }

}  // namespace mixgrad::autodiff
