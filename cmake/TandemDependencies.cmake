# Finds the required libraries (all from Debian packages, see
# scripts/install-deps.sh) and the optional ones (CUDA toolkit, Qt 6, MPI).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(SQLite3 REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)
find_package(ZLIB REQUIRED)

# yaml-cpp 0.7 in Debian exports the plain target name only.
if(TARGET yaml-cpp AND NOT TARGET yaml-cpp::yaml-cpp)
  add_library(yaml-cpp::yaml-cpp ALIAS yaml-cpp)
endif()

set(TANDEM_HAVE_CUDA OFF)
if(TANDEM_WITH_CUDA)
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Hopper (H100/H200). Never "native": the build machine has no GPU.
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND)
      set(TANDEM_HAVE_CUDA ON)
    endif()
  endif()
endif()

set(TANDEM_HAVE_QT OFF)
if(TANDEM_WITH_GUI)
  find_package(Qt6 6.2 QUIET COMPONENTS Core Gui Widgets Test)
  if(Qt6_FOUND)
    set(TANDEM_HAVE_QT ON)
  endif()
endif()

# MPI (Debian's OpenMPI): `tandem run` under mpirun exchanges the NCCL id with
# MPI_Bcast. AUTO uses it when found, ON requires it, OFF never uses it (build
# folders for machines without libmpi: a binary linked with it would not start
# there). Without MPI the ranks meet through a shared folder (--rendezvous).
set(TANDEM_WITH_MPI AUTO CACHE STRING "MPI launch support: AUTO, ON or OFF")
set_property(CACHE TANDEM_WITH_MPI PROPERTY STRINGS AUTO ON OFF)
set(TANDEM_HAVE_MPI OFF)
if(NOT TANDEM_WITH_MPI STREQUAL "OFF")
  # The C API through the C++ compiler (the project enables no C language);
  # the deprecated MPI C++ bindings are not needed.
  set(MPI_CXX_SKIP_MPICXX ON CACHE BOOL "tandem uses the MPI C API only")
  if(TANDEM_WITH_MPI STREQUAL "ON")
    find_package(MPI REQUIRED COMPONENTS CXX)
  else()
    find_package(MPI QUIET COMPONENTS CXX)
  endif()
  if(MPI_CXX_FOUND)
    set(TANDEM_HAVE_MPI ON)
  endif()
endif()

if(TANDEM_BUILD_TESTS)
  find_package(Catch2 2.13 REQUIRED)
endif()
