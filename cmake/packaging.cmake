# Debian packages (docs/install.md): in a tree configured with -DBUILD_SHARED_LIBS=ON,
#   cpack -G DEB
# makes libdlock0 (the shared libraries), libdlock-dev (headers, .so links, CMake and pkg-config
# files) and dlock-tools (the CLI, dlock(1), bash and zsh completions), installed under /usr.
if(NOT BUILD_SHARED_LIBS)
  message(STATUS "dlock: the Debian packages (cpack -G DEB) need -DBUILD_SHARED_LIBS=ON; "
                 "this tree builds static libraries and has no CPack configuration")
  file(REMOVE ${PROJECT_BINARY_DIR}/CPackConfig.cmake ${PROJECT_BINARY_DIR}/CPackSourceConfig.cmake)
  return()
endif()
# Debian's policy puts shared libraries in the multiarch directory, /usr/lib/<triplet>; a shared
# tree defaults to it (CMakeLists.txt), and a tree configured otherwise makes no packages.
if(CMAKE_LIBRARY_ARCHITECTURE AND EXISTS /etc/debian_version
   AND NOT CMAKE_INSTALL_LIBDIR STREQUAL "lib/${CMAKE_LIBRARY_ARCHITECTURE}")
  message(WARNING "dlock: the Debian packages (cpack -G DEB) install the libraries to "
                  "/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}, but this tree has "
                  "CMAKE_INSTALL_LIBDIR=${CMAKE_INSTALL_LIBDIR}: no CPack configuration (configure "
                  "with -DCMAKE_INSTALL_LIBDIR=lib/${CMAKE_LIBRARY_ARCHITECTURE} to package)")
  file(REMOVE ${PROJECT_BINARY_DIR}/CPackConfig.cmake ${PROJECT_BINARY_DIR}/CPackSourceConfig.cmake)
  return()
endif()

set(CPACK_PACKAGE_NAME dlock)
set(CPACK_PACKAGE_VENDOR dlock)
# The packages' Maintainer (and their changelog's signature). dlock has no mail address of its
# own, so the default is in the reserved .invalid domain; whoever distributes the packages sets
# their own.
set(DLOCK_DEB_MAINTAINER "dlock maintainers <maintainers@dlock.invalid>" CACHE STRING
    "Maintainer of the Debian packages (cpack -G DEB), as 'Name <address>'")
set(CPACK_PACKAGE_CONTACT "${DLOCK_DEB_MAINTAINER}")
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
# lintian: description lines of at most 80 characters.
string(CONCAT CPACK_DEBIAN_RUNTIME_DESCRIPTION
    "distributed locks for C++20: shared libraries\n"
    "dlock's mutex, fair, recursive and shared mutexes, semaphores and multi-locks\n"
    "over Redis, Redlock, ZooKeeper and etcd, with leases, renewal, fencing tokens.")
# ldconfig runs from libc's dpkg trigger (cmake/debian/triggers). CPack still adds ldconfig calls
# to libdlock0's postinst and postrm (a library under /usr/lib); the override file says why they
# stay (docs/install.md).
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA ${CMAKE_CURRENT_LIST_DIR}/debian/triggers)

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libdlock-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# The headers include only the C++ standard library; the shared libraries carry hiredis,
# libzookeeper-mt and gRPC, so no other -dev package is needed.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${dlock_deb_exact}")
string(CONCAT CPACK_DEBIAN_DEV_DESCRIPTION
    "distributed locks for C++20: development files\n"
    "Headers, the CMake package (find_package(dlock CONFIG)) and pkg-config files\n"
    "(dlock-core, dlock-redis, dlock-zookeeper, dlock-etcd, dlock) for dlock.")

set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME dlock-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS "${dlock_deb_exact}")
string(CONCAT CPACK_DEBIAN_TOOLS_DESCRIPTION
    "distributed locks for C++20: the dlock command\n"
    "dlock run NAME -- COMMAND runs a command while holding a distributed lock\n"
    "(flock(1) across machines); dlock status shows a lock. With dlock(1) and bash\n"
    "and zsh completions.")

# Every package carries /usr/share/doc/<package>/copyright (Debian's machine-readable format,
# cmake/debian/copyright) and changelog.gz: the version has no Debian revision, so these are
# native packages, whose changelog is in Debian's format (cmake/debian/changelog.in, dated when
# configured, or by SOURCE_DATE_EPOCH). Installed only with their component (cpack, cmake
# --install --component), not by a plain cmake --install. tests/consumer/run.sh runs lintian.
string(TIMESTAMP dlock_deb_date "%a, %d %b %Y %H:%M:%S +0000" UTC)
configure_file(${CMAKE_CURRENT_LIST_DIR}/debian/changelog.in ${PROJECT_BINARY_DIR}/debian/changelog
               @ONLY)
execute_process(COMMAND gzip -9nc ${PROJECT_BINARY_DIR}/debian/changelog
                OUTPUT_FILE ${PROJECT_BINARY_DIR}/debian/changelog.gz RESULT_VARIABLE dlock_gzip)
if(NOT dlock_gzip EQUAL 0)
  message(FATAL_ERROR "dlock: gzip of the Debian changelog failed: ${dlock_gzip}")
endif()
foreach(dlock_component IN ITEMS RUNTIME DEV TOOLS)
  string(TOLOWER ${dlock_component} dlock_install_component)
  install(FILES ${CMAKE_CURRENT_LIST_DIR}/debian/copyright ${PROJECT_BINARY_DIR}/debian/changelog.gz
    DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${CPACK_DEBIAN_${dlock_component}_PACKAGE_NAME}
    COMPONENT ${dlock_install_component} EXCLUDE_FROM_ALL)
endforeach()
install(FILES ${CMAKE_CURRENT_LIST_DIR}/debian/libdlock0.lintian-overrides
  DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/lintian/overrides
  RENAME ${CPACK_DEBIAN_RUNTIME_PACKAGE_NAME} COMPONENT runtime EXCLUDE_FROM_ALL)

include(CPack)
