# One place for compiler warnings so every target treats them alike.
add_library(tandem_warnings INTERFACE)
target_compile_options(tandem_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
