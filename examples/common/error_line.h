// examples/common/error_line.h — the one line an example prints for an error that reaches main.
//
// A c10::Error's what() carries libtorch's backtrace ("Exception raised from ...", then a frame
// per line): dozens of lines for one problem. The examples check their inputs before libtorch
// sees them; what still escapes (an allocation that fails, say) is printed by its first line.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace examples {

inline std::string error_line(const std::exception& e) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  std::string what = torch_error ? torch_error->what_without_backtrace() : e.what();
  if (const auto end = what.find('\n'); end != std::string::npos) what.resize(end);
  return what;
}

}  // namespace examples
