# Printed at the end of configure so a user sees at once which parts build here.
message(STATUS "")
message(STATUS "tandem ${PROJECT_VERSION} will build:")
message(STATUS "  engine, CPU reference executor, simulator, trace store, CLI : yes")
message(STATUS "  CUDA executor and CUPTI profiler (CUDA toolkit)             : ${TANDEM_HAVE_CUDA}")
message(STATUS "  tandem-gui (Qt 6)                                           : ${TANDEM_HAVE_QT}")
message(STATUS "  MPI launch support (OpenMPI)                                : ${TANDEM_HAVE_MPI}")
message(STATUS "  tests / benchmarks                                          : ${TANDEM_BUILD_TESTS} / ${TANDEM_BUILD_BENCH}")
message(STATUS "")
