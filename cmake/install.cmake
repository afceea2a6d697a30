# Install rules (docs/install.md): the libraries with their headers, the CMake package
# (find_package(dlock CONFIG REQUIRED COMPONENTS redis zookeeper)) and one pkg-config file per
# component. The CLI installs itself (tools/dlock/CMakeLists.txt); tests, benchmarks and examples
# are not installed. Install components (cmake --install --component, and the .debs of
# cmake/packaging.cmake): runtime (shared libraries), dev (headers, static libraries, .so links,
# CMake and pkg-config files), tools (the CLI), prometheus (the optional adapter, in no .deb).
include(CMakePackageConfigHelpers)

# It follows CMAKE_INSTALL_LIBDIR (<libdir>/cmake/dlock) unless set to something else: a tree
# whose libdir changes (to the multiarch directory, CMakeLists.txt) moves its package with it.
# lib/cmake/dlock was the default of trees configured before the default was tracked.
set(dlock_cmakedir_default ${CMAKE_INSTALL_LIBDIR}/cmake/dlock)
if(NOT DEFINED DLOCK_INSTALL_CMAKEDIR
   OR (DEFINED DLOCK_INSTALL_CMAKEDIR_DEFAULT
       AND DLOCK_INSTALL_CMAKEDIR STREQUAL DLOCK_INSTALL_CMAKEDIR_DEFAULT)
   OR (NOT DEFINED DLOCK_INSTALL_CMAKEDIR_DEFAULT AND DLOCK_INSTALL_CMAKEDIR STREQUAL "lib/cmake/dlock"))
  set(DLOCK_INSTALL_CMAKEDIR ${dlock_cmakedir_default} CACHE STRING
      "Where dlock's CMake package goes, relative to the prefix" FORCE)
endif()
set(DLOCK_INSTALL_CMAKEDIR_DEFAULT ${dlock_cmakedir_default} CACHE INTERNAL
    "DLOCK_INSTALL_CMAKEDIR's default when last configured")
mark_as_advanced(DLOCK_INSTALL_CMAKEDIR)

# The components of this build, as find_package(dlock COMPONENTS ...) and pkg-config name them.
set(DLOCK_PACKAGE_COMPONENTS core)
set(DLOCK_PACKAGE_TARGETS dlock_core)
if(TARGET dlock_redis)
  list(APPEND DLOCK_PACKAGE_COMPONENTS redis)
  list(APPEND DLOCK_PACKAGE_TARGETS dlock_redis)
endif()
if(TARGET dlock_zk)
  list(APPEND DLOCK_PACKAGE_COMPONENTS zookeeper)
  list(APPEND DLOCK_PACKAGE_TARGETS dlock_zk)
endif()
if(TARGET dlock_etcd)
  list(APPEND DLOCK_PACKAGE_COMPONENTS etcd)
  list(APPEND DLOCK_PACKAGE_TARGETS dlock_etcd)
endif()
list(APPEND DLOCK_PACKAGE_TARGETS dlock)

install(TARGETS ${DLOCK_PACKAGE_TARGETS} EXPORT dlockTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  FILE_SET HEADERS COMPONENT dev)
install(EXPORT dlockTargets NAMESPACE dlock:: DESTINATION ${DLOCK_INSTALL_CMAKEDIR} COMPONENT dev)

# The prometheus-cpp adapter: its own export set, so that an installation without it (the .debs)
# still has a complete dlockTargets.cmake.
if(TARGET dlock_prometheus)
  install(TARGETS dlock_prometheus EXPORT dlockPrometheusTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT prometheus NAMELINK_COMPONENT prometheus
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT prometheus
    FILE_SET HEADERS COMPONENT prometheus)
  install(EXPORT dlockPrometheusTargets NAMESPACE dlock:: DESTINATION ${DLOCK_INSTALL_CMAKEDIR}
    COMPONENT prometheus)
endif()

# A static build's users link what the libraries link privately; dlockConfig.cmake finds it.
if(BUILD_SHARED_LIBS)
  set(DLOCK_PACKAGE_STATIC 0)
else()
  set(DLOCK_PACKAGE_STATIC 1)
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/dlockConfig.cmake.in
  ${PROJECT_BINARY_DIR}/dlockConfig.cmake INSTALL_DESTINATION ${DLOCK_INSTALL_CMAKEDIR}
  NO_SET_AND_CHECK_MACRO NO_CHECK_REQUIRED_COMPONENTS_MACRO)
# 0.x: a request for 0.1 accepts 0.1.y and later 0.y (SameMajorVersion).
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dlockConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dlockConfig.cmake ${PROJECT_BINARY_DIR}/dlockConfigVersion.cmake
  DESTINATION ${DLOCK_INSTALL_CMAKEDIR} COMPONENT dev)

# pkg-config: dlock-core.pc, dlock-redis.pc, dlock-zookeeper.pc and dlock.pc (all of this build).
# Relocatable (prefix from ${pcfiledir}): the same files serve cmake --install --prefix and /usr.
# Private dependencies are Requires.private / Libs.private for shared libraries, and plain
# Requires / Libs for static ones (there is no shared library to carry them).
set(dlock_pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(IS_ABSOLUTE ${dlock_pc_dir})
  set(dlock_pc_prefix ${CMAKE_INSTALL_PREFIX})
else()
  file(RELATIVE_PATH dlock_pc_up /dlock-prefix/${dlock_pc_dir} /dlock-prefix)
  string(REGEX REPLACE "/$" "" dlock_pc_up "${dlock_pc_up}")
  set(dlock_pc_prefix "\${pcfiledir}/${dlock_pc_up}")
endif()
if(IS_ABSOLUTE ${CMAKE_INSTALL_LIBDIR})
  set(dlock_pc_libdir ${CMAKE_INSTALL_LIBDIR})
else()
  set(dlock_pc_libdir "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE ${CMAKE_INSTALL_INCLUDEDIR})
  set(dlock_pc_includedir ${CMAKE_INSTALL_INCLUDEDIR})
else()
  set(dlock_pc_includedir "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()

# dlock_pkg_config(NAME LIB DESCRIPTION [REQUIRES ...] [LIBS ...] [PRIVATE_REQUIRES ...]
#                  [PRIVATE_LIBS ...])
function(dlock_pkg_config name lib description)
  cmake_parse_arguments(PARSE_ARGV 3 arg "" "" "REQUIRES;LIBS;PRIVATE_REQUIRES;PRIVATE_LIBS")
  if(NOT BUILD_SHARED_LIBS)
    list(APPEND arg_REQUIRES ${arg_PRIVATE_REQUIRES})
    list(APPEND arg_LIBS ${arg_PRIVATE_LIBS})
    set(arg_PRIVATE_REQUIRES "")
    set(arg_PRIVATE_LIBS "")
  endif()
  set(pc_name ${name})
  set(pc_lib ${lib})
  set(pc_description ${description})
  list(JOIN arg_REQUIRES ", " pc_requires)
  list(JOIN arg_PRIVATE_REQUIRES ", " pc_requires_private)
  list(JOIN arg_LIBS " " pc_libs)
  list(JOIN arg_PRIVATE_LIBS " " pc_libs_private)
  configure_file(${CMAKE_CURRENT_FUNCTION_LIST_DIR}/dlock.pc.in
                 ${PROJECT_BINARY_DIR}/pkgconfig/${name}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/pkgconfig/${name}.pc DESTINATION ${dlock_pc_dir}
    COMPONENT dev)
endfunction()

dlock_pkg_config(dlock-core dlock_core "dlock: backend-neutral distributed lock types (dlock::core)"
  LIBS -pthread)
set(dlock_pc_all "")
if(TARGET dlock_redis)
  dlock_pkg_config(dlock-redis dlock_redis "dlock: the Redis and Redlock backend (dlock::redis)"
    REQUIRES dlock-core PRIVATE_REQUIRES hiredis openssl)
  list(APPEND dlock_pc_all dlock-redis)
endif()
if(TARGET dlock_zk)
  dlock_pkg_config(dlock-zookeeper dlock_zk "dlock: the ZooKeeper backend (dlock::zk)"
    REQUIRES dlock-core PRIVATE_LIBS -lzookeeper_mt)
  list(APPEND dlock_pc_all dlock-zookeeper)
endif()
if(TARGET dlock_etcd)
  dlock_pkg_config(dlock-etcd dlock_etcd "dlock: the etcd backend (dlock::etcd)"
    REQUIRES dlock-core PRIVATE_REQUIRES grpc++ protobuf)
  list(APPEND dlock_pc_all dlock-etcd)
endif()
dlock_pkg_config(dlock dlock
  "dlock: distributed locks for C++20, every backend of this build and dlock::connect()"
  REQUIRES ${dlock_pc_all} dlock-core)
