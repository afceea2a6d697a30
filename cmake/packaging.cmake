# Debian packages (docs/install.md): in a tree configured with -DBUILD_SHARED_LIBS=ON,
#   cpack -G DEB
# makes libdlock0 (the shared libraries), libdlock-dev (headers, .so links, CMake and pkg-config
# files) and dlock-tools (the CLI, dlock(1), bash and zsh completions), installed under /usr.
if(NOT BUILD_SHARED_LIBS)
  message(STATUS "dlock: the Debian packages (cpack -G DEB) need -DBUILD_SHARED_LIBS=ON; "
                 "this tree builds static libraries and has no CPack configuration")
  return()
endif()

set(CPACK_PACKAGE_NAME dlock)
set(CPACK_PACKAGE_VENDOR dlock)
set(CPACK_PACKAGE_CONTACT "dlock maintainers <dlock@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
# No CPACK_PACKAGE_DESCRIPTION_SUMMARY: each package's description below starts with its own
# synopsis line.
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
# The prometheus adapter (install component prometheus) is in no package: it would make every
# user of libdlock0 install prometheus-cpp.
set(CPACK_COMPONENTS_ALL runtime dev tools)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # NAME_VERSION_ARCH.deb

# Depends from dpkg-shlibdeps (libc6, libhiredis0.14, libzookeeper-mt2, libfmt9, ...); it finds
# dlock's own libraries, which belong to no installed package yet, in this tree.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR}/src)
# A shlibs file in libdlock0, so that dpkg-shlibdeps of programs built against it finds it.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(dlock_deb_exact "libdlock${PROJECT_VERSION_MAJOR} (= ${PROJECT_VERSION})")

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libdlock${PROJECT_VERSION_MAJOR})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
string(CONCAT CPACK_DEBIAN_RUNTIME_DESCRIPTION
    "distributed locks for C++20: shared libraries\n"
    "dlock's mutex, fair, recursive and shared mutexes, semaphores and multi-locks over Redis,\n"
    "Redlock and ZooKeeper, with leases, renewal and fencing tokens.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libdlock-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# The headers include only the C++ standard library; the shared libraries carry hiredis and
# libzookeeper-mt, so no other -dev package is needed.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${dlock_deb_exact}")
string(CONCAT CPACK_DEBIAN_DEV_DESCRIPTION
    "distributed locks for C++20: development files\n"
    "Headers, the CMake package (find_package(dlock CONFIG)) and pkg-config files (dlock-core,\n"
    "dlock-redis, dlock-zookeeper, dlock) for the dlock library.")

set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME dlock-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS "${dlock_deb_exact}")
string(CONCAT CPACK_DEBIAN_TOOLS_DESCRIPTION
    "distributed locks for C++20: the dlock command\n"
    "dlock run NAME -- COMMAND runs a command while holding a distributed lock (flock(1) across\n"
    "machines); dlock status shows a lock. With dlock(1) and bash and zsh completions.")

include(CPack)
