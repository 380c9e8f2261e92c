# Helpers that keep every folder's CMakeLists.txt to a few lines.

# tandem_library(NAME <target> [CUDA] [SUBDIRS dir...] PUBLIC_DEPS ... PRIVATE_DEPS ...
#                [EXCLUDE file...])
# Builds every *.cpp (and *.cu with CUDA) of the current folder and of the
# named sub-folders (the library's stages: engine/spec, engine/passes, ...),
# less the EXCLUDE'd file names (relative to the current folder), into a
# static library. Sub-folders not named (engine/cpu, engine/cuda) are other
# libraries. The repository root is the include root, so code includes
# "engine/plan/plan.h", "traces/store/trace_writer.h" and so on.
function(tandem_library)
  cmake_parse_arguments(ARG "CUDA" "NAME" "PUBLIC_DEPS;PRIVATE_DEPS;EXCLUDE;SUBDIRS" ${ARGN})
  set(sources "")
  foreach(dir . ${ARG_SUBDIRS})
    file(GLOB dir_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${dir}/*.cpp)
    list(APPEND sources ${dir_sources})
    if(ARG_CUDA)
      file(GLOB cu_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${dir}/*.cu)
      list(APPEND sources ${cu_sources})
    endif()
  endforeach()
  list(TRANSFORM sources REPLACE "/\\./" "/")
  foreach(name IN LISTS ARG_EXCLUDE)
    list(REMOVE_ITEM sources ${CMAKE_CURRENT_SOURCE_DIR}/${name})
  endforeach()
  if(NOT sources)
    # A module whose sources are still to come: headers only for now.
    add_library(${ARG_NAME} INTERFACE)
    target_include_directories(${ARG_NAME} INTERFACE ${PROJECT_SOURCE_DIR})
    target_link_libraries(${ARG_NAME} INTERFACE ${ARG_PUBLIC_DEPS})
    return()
  endif()
  add_library(${ARG_NAME} STATIC ${sources})
  target_include_directories(${ARG_NAME} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${ARG_NAME} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE tandem_warnings ${ARG_PRIVATE_DEPS})
  set_target_properties(${ARG_NAME} PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()

# tandem_test_suite(NAME <exe> DIR <folder under tests/> LIBS ... [LABELS ...])
# One Catch2 executable per folder of tests, registered with CTest as one test
# per executable (fast on 2 cores; Catch2 prints the failing case itself).
function(tandem_test_suite)
  cmake_parse_arguments(ARG "" "NAME;DIR" "LIBS;LABELS" ${ARGN})
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${ARG_DIR}/*.cpp)
  if(NOT sources)
    return()
  endif()
  add_executable(${ARG_NAME} ${sources} ${CMAKE_CURRENT_SOURCE_DIR}/catch_main.cpp)
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_LIBS} Catch2::Catch2 tandem_warnings)
  target_include_directories(${ARG_NAME} PRIVATE ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  target_compile_definitions(${ARG_NAME} PRIVATE
    TANDEM_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    TANDEM_BINARY_DIR="${PROJECT_BINARY_DIR}")
  add_test(NAME ${ARG_NAME} COMMAND ${ARG_NAME})
  set_tests_properties(${ARG_NAME} PROPERTIES
    LABELS "${ARG_LABELS}" SKIP_RETURN_CODE 77
    ENVIRONMENT "QT_QPA_PLATFORM=offscreen;TANDEM_BIN=$<TARGET_FILE_DIR:tandem>/tandem")
endfunction()
