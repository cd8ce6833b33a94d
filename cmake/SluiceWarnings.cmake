# One INTERFACE target that carries the project's warning and sanitizer flags; every sluice
# library links it PRIVATE, so the flags never leak into consumers' or third-party code.
add_library(sluice_warnings INTERFACE)
target_compile_options(sluice_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align -Woverloaded-virtual
  -Wimplicit-fallthrough)
if(SLUICE_SANITIZE)
  target_compile_options(sluice_warnings INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer)
  target_link_options(sluice_warnings INTERFACE -fsanitize=address,undefined)
endif()
