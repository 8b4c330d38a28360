# Installing cohort for other projects (issue 20): `cmake --install build --prefix P` puts the
# library, the public headers, the `cohort` and `cohort-store` commands, a CMake package (find_package(cohort) ->
# cohort::cohort) and a pkg-config file under P. docs/install.md says how to consume each.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Installed programs and the library find libcohort beside them (P/bin -> P/lib), and a libtorch
# outside the system's directories (a wheel's) where the build found it.
set_target_properties(cohort cohort_cli cohort_store_host PROPERTIES
  INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}"
  INSTALL_RPATH_USE_LINK_PATH TRUE)

install(TARGETS cohort EXPORT cohortTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS cohort_cli cohort_store_host RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/cohort ${PROJECT_BINARY_DIR}/include/cohort
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")

set(cohort_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/cohort)
install(EXPORT cohortTargets NAMESPACE cohort:: DESTINATION ${cohort_cmake_dir})
# The package refuses a libtorch of another major.minor than COHORT_TORCH_MAJOR_MINOR (ABI).
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/cohortConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cohortConfig.cmake INSTALL_DESTINATION ${cohort_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cohortConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)  # 0.x: a minor version may change the API
install(FILES ${PROJECT_BINARY_DIR}/cohortConfig.cmake ${PROJECT_BINARY_DIR}/cohortConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/cohortTorchLibraryPath.cmake DESTINATION ${cohort_cmake_dir})

# pkg-config, for builds without CMake: cohort's own flags plus libtorch's (its include folders,
# ABI flag, libraries), since libtorch ships no .pc file. Relocatable: paths from ${pcfiledir}.
set(pc_cflags "")
foreach(dir IN LISTS TORCH_INCLUDE_DIRS)
  string(APPEND pc_cflags " -I${dir}")
endforeach()
foreach(def IN LISTS COHORT_TORCH_DEFS)
  string(APPEND pc_cflags " -D${def}")
endforeach()
string(APPEND pc_cflags " ${TORCH_CXX_FLAGS}")
set(pc_libs "")
foreach(name IN ITEMS torch torch_cpu c10)
  find_library(COHORT_PC_${name} NAMES ${name} HINTS ${COHORT_TORCH_LIB_DIR} NO_DEFAULT_PATH)
  if(COHORT_PC_${name})
    string(APPEND pc_libs " ${COHORT_PC_${name}}")
  endif()
endforeach()
if(NOT COHORT_TORCH_LIB_DIR MATCHES "^/usr/lib")
  string(APPEND pc_libs " -Wl,-rpath,${COHORT_TORCH_LIB_DIR}")
endif()
string(STRIP "${pc_cflags}" COHORT_PC_CFLAGS)
string(STRIP "${pc_libs}" COHORT_PC_LIBS)
configure_file(${PROJECT_SOURCE_DIR}/cmake/cohort.pc.in ${PROJECT_BINARY_DIR}/cohort.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cohort.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
