# A Debian package of cohort (issue 20): `cpack --config build/CPackConfig.cmake` in build/ makes
# cohort_VERSION_amd64.deb, installable with `apt-get install ./cohort_*.deb` beside Debian's
# libtorch. Only for a build against Debian's libtorch: a wheel's libtorch is no Debian package to
# depend on.
if(NOT COHORT_TORCH_PREFIX STREQUAL "/usr")
  return()
endif()
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME cohort)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "distributed training for libtorch C++ programs")
set(CPACK_PACKAGE_DESCRIPTION "DistributedDataParallel, sharded data parallelism, checkpointing and
the cohort launcher for programs on the PyTorch C++ frontend (libtorch).")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "cohort developers <cohort@localhost>")
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
# The shared libraries' packages (libtorch1.13, libspdlog, libxxhash, zlib, ...) from
# dpkg-shlibdeps; for consumers' builds also libtorch's and Gloo's headers, of the same
# libtorch major.minor (its C++ ABI changes between minor versions).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS
  "libtorch-dev (>= ${COHORT_TORCH_MAJOR_MINOR}), libtorch-dev (<< ${COHORT_TORCH_MAJOR_MINOR}.999), libgloo-dev")
include(CPack)
