# Torch's config finds its libraries with find_library(... PATHS <its prefix>/lib), and CMake
# searches the system's library directories before such PATHS: where Debian's libtorch is installed
# too, a libtorch 2.x given by CMAKE_PREFIX_PATH would get its own headers but Debian's libraries.
# So the lib/ folder beside each Torch config on CMAKE_PREFIX_PATH is searched first. Included
# before find_package(Torch) by cohort's build and by its installed package (cohortConfig.cmake).
foreach(cohort_prefix IN LISTS CMAKE_PREFIX_PATH)
  if(EXISTS "${cohort_prefix}/Torch/TorchConfig.cmake")                # torch.utils.cmake_prefix_path
    get_filename_component(cohort_torch_lib "${cohort_prefix}/../../lib" ABSOLUTE)
    list(APPEND CMAKE_LIBRARY_PATH "${cohort_torch_lib}")
  elseif(EXISTS "${cohort_prefix}/share/cmake/Torch/TorchConfig.cmake")  # an unpacked libtorch
    list(APPEND CMAKE_LIBRARY_PATH "${cohort_prefix}/lib")
  endif()
endforeach()
