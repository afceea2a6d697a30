# The etcd backend's transport (docs/etcd.md): gRPC C++ and protobuf from Debian (libgrpc++-dev,
# protobuf-compiler-grpc, libprotobuf-dev), and C++ stubs generated at build time from etcd's own
# .proto files. The repo holds no .proto text: they come from Debian's golang-etcd-server-dev
# (and the two packages whose files they import), installed, or downloaded and unpacked into the
# build tree by scripts/fetch-etcd-proto.sh (at configure time when missing; cached).
#
# Defines dlock_etcd_stubs(TARGET): an object library of the generated stubs (a custom command's
# outputs belong to the directory that defines it, so src/CMakeLists.txt calls it), compiled once
# per tree, without warnings (generated code), without a sanitizer and without debug information
# (gRPC and protobuf themselves are neither instrumented nor debugged here), position-independent
# (for static and shared libraries alike). Their objects are therefore the same in every tree, so
# a tree configured with DLOCK_ETCD_STUBS_FROM=<another build tree of this source, whose
# dlock_etcd_stubs target is built> uses that tree's generated headers and objects instead of
# generating and compiling its own (scripts/test.sh: the sanitizer, Release and clang trees use
# build/'s).
find_package(gRPC CONFIG)
find_program(DLOCK_PROTOC protoc)
find_program(DLOCK_GRPC_CPP_PLUGIN grpc_cpp_plugin)
if(NOT gRPC_FOUND OR NOT DLOCK_PROTOC OR NOT DLOCK_GRPC_CPP_PLUGIN)
  message(FATAL_ERROR "dlock: the etcd backend needs gRPC C++ and protoc with grpc_cpp_plugin "
                      "(Debian: libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev; "
                      "scripts/setup.sh installs them), or configure with -DDLOCK_WITH_ETCD=OFF")
endif()

# DLOCK_ETCD_PROTO_ROOT: a directory with go.etcd.io/etcd, github.com/gogo/protobuf and
# github.com/grpc-ecosystem/grpc-gateway below it (Debian's /usr/share/gocode/src layout).
set(DLOCK_ETCD_PROTO_ROOT "" CACHE PATH
    "Where etcd's .proto files are (a gocode/src directory); empty: installed or fetched")
set(dlock_etcd_rpc go.etcd.io/etcd/etcdserver/etcdserverpb/rpc.proto)
set(dlock_etcd_proto_root "${DLOCK_ETCD_PROTO_ROOT}")
if(dlock_etcd_proto_root STREQUAL "")
  set(dlock_etcd_fetched ${PROJECT_BINARY_DIR}/etcd-proto)
  if(EXISTS /usr/share/gocode/src/${dlock_etcd_rpc}
     AND EXISTS /usr/share/gocode/src/github.com/gogo/protobuf/gogoproto/gogo.proto
     AND EXISTS /usr/share/gocode/src/github.com/grpc-ecosystem/grpc-gateway/third_party)
    set(dlock_etcd_proto_root /usr/share/gocode/src)
  else()
    execute_process(COMMAND ${PROJECT_SOURCE_DIR}/scripts/fetch-etcd-proto.sh ${dlock_etcd_fetched}
                    RESULT_VARIABLE dlock_fetch_rc)
    if(NOT dlock_fetch_rc EQUAL 0)
      message(FATAL_ERROR "dlock: cannot fetch etcd's .proto files (scripts/fetch-etcd-proto.sh); "
                          "set DLOCK_ETCD_PROTO_ROOT or configure with -DDLOCK_WITH_ETCD=OFF")
    endif()
    set(dlock_etcd_proto_root ${dlock_etcd_fetched}/usr/share/gocode/src)
  endif()
endif()
if(NOT EXISTS ${dlock_etcd_proto_root}/${dlock_etcd_rpc})
  message(FATAL_ERROR "dlock: no ${dlock_etcd_rpc} under ${dlock_etcd_proto_root}")
endif()

# protoc's import roots, as rpc.proto's imports name them: "etcd/mvcc/mvccpb/kv.proto",
# "gogoproto/gogo.proto", "google/api/annotations.proto", "google/protobuf/descriptor.proto".
set(dlock_gogo ${dlock_etcd_proto_root}/github.com/gogo/protobuf)
set(dlock_googleapis ${dlock_etcd_proto_root}/github.com/grpc-ecosystem/grpc-gateway/third_party/googleapis)
set(dlock_proto_imports -I${dlock_etcd_proto_root}/go.etcd.io -I${dlock_gogo} -I${dlock_googleapis})
if(Protobuf_INCLUDE_DIRS)
  foreach(dir IN LISTS Protobuf_INCLUDE_DIRS)
    list(APPEND dlock_proto_imports -I${dir})
  endforeach()
endif()
# Every file rpc.proto needs, by its import name: the generated code of each registers its
# descriptor, so all of them are compiled (the options of gogo and google.api are otherwise
# unused).
set(dlock_proto_files
  etcd/etcdserver/etcdserverpb/rpc.proto etcd/mvcc/mvccpb/kv.proto etcd/auth/authpb/auth.proto
  gogoproto/gogo.proto google/api/annotations.proto google/api/http.proto)
set(dlock_proto_paths
  ${dlock_etcd_proto_root}/go.etcd.io/etcd/etcdserver/etcdserverpb/rpc.proto
  ${dlock_etcd_proto_root}/go.etcd.io/etcd/mvcc/mvccpb/kv.proto
  ${dlock_etcd_proto_root}/go.etcd.io/etcd/auth/authpb/auth.proto
  ${dlock_gogo}/gogoproto/gogo.proto
  ${dlock_googleapis}/google/api/annotations.proto ${dlock_googleapis}/google/api/http.proto)

set(DLOCK_ETCD_STUBS_FROM "" CACHE PATH
    "A build tree of this source whose built etcd stubs this tree uses (empty: its own)")

set(DLOCK_ETCD_PROTO_IMPORTS ${dlock_proto_imports})
set(DLOCK_ETCD_PROTO_FILES ${dlock_proto_files})
set(DLOCK_ETCD_PROTO_PATHS ${dlock_proto_paths})

function(dlock_etcd_stubs target)
  set(DLOCK_ETCD_PROTO_INCLUDE_DIR ${PROJECT_BINARY_DIR}/etcd_stubs)
  set(DLOCK_ETCD_PROTO_SOURCES "")
  set(DLOCK_ETCD_PROTO_HEADERS "")
  foreach(f IN LISTS DLOCK_ETCD_PROTO_FILES)
    string(REGEX REPLACE "\\.proto$" "" base ${f})
    list(APPEND DLOCK_ETCD_PROTO_SOURCES ${DLOCK_ETCD_PROTO_INCLUDE_DIR}/${base}.pb.cc)
    list(APPEND DLOCK_ETCD_PROTO_HEADERS ${DLOCK_ETCD_PROTO_INCLUDE_DIR}/${base}.pb.h)
  endforeach()
  list(APPEND DLOCK_ETCD_PROTO_SOURCES
    ${DLOCK_ETCD_PROTO_INCLUDE_DIR}/etcd/etcdserver/etcdserverpb/rpc.grpc.pb.cc)
  list(APPEND DLOCK_ETCD_PROTO_HEADERS
    ${DLOCK_ETCD_PROTO_INCLUDE_DIR}/etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h)
  if(NOT DLOCK_ETCD_STUBS_FROM STREQUAL "")
    # Another tree's stubs: its objects (where that tree's ninja puts them) and, through a link in
    # place of this tree's etcd_stubs directory, its headers.
    get_filename_component(from ${DLOCK_ETCD_STUBS_FROM} ABSOLUTE)
    if(from STREQUAL PROJECT_BINARY_DIR)
      message(FATAL_ERROR "dlock: DLOCK_ETCD_STUBS_FROM names this tree itself")
    endif()
    set(objects "")
    foreach(src IN LISTS DLOCK_ETCD_PROTO_SOURCES)
      file(RELATIVE_PATH rel ${DLOCK_ETCD_PROTO_INCLUDE_DIR} ${src})
      set(obj ${from}/src/CMakeFiles/${target}.dir/__/etcd_stubs/${rel}.o)
      if(NOT EXISTS ${obj})
        message(FATAL_ERROR "dlock: DLOCK_ETCD_STUBS_FROM=${from}: no ${obj} "
                            "(build the target ${target} there first: ninja -C ${from} ${target})")
      endif()
      list(APPEND objects ${obj})
    endforeach()
    if(IS_DIRECTORY ${DLOCK_ETCD_PROTO_INCLUDE_DIR} AND NOT IS_SYMLINK ${DLOCK_ETCD_PROTO_INCLUDE_DIR})
      file(REMOVE_RECURSE ${DLOCK_ETCD_PROTO_INCLUDE_DIR})
    endif()
    file(CREATE_LINK ${from}/etcd_stubs ${DLOCK_ETCD_PROTO_INCLUDE_DIR} SYMBOLIC)
    add_library(${target} OBJECT IMPORTED GLOBAL)
    set_target_properties(${target} PROPERTIES IMPORTED_OBJECTS "${objects}")
    target_include_directories(${target} SYSTEM INTERFACE ${DLOCK_ETCD_PROTO_INCLUDE_DIR})
    target_link_libraries(${target} INTERFACE gRPC::grpc++ protobuf::libprotobuf)
    message(STATUS "dlock: the etcd stubs of ${from}")
    return()
  endif()
  if(IS_SYMLINK ${DLOCK_ETCD_PROTO_INCLUDE_DIR})  # DLOCK_ETCD_STUBS_FROM was set before
    file(REMOVE ${DLOCK_ETCD_PROTO_INCLUDE_DIR})
  endif()
  add_custom_command(
    OUTPUT ${DLOCK_ETCD_PROTO_SOURCES} ${DLOCK_ETCD_PROTO_HEADERS}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${DLOCK_ETCD_PROTO_INCLUDE_DIR}
    COMMAND ${DLOCK_PROTOC} ${DLOCK_ETCD_PROTO_IMPORTS} --cpp_out=${DLOCK_ETCD_PROTO_INCLUDE_DIR}
            ${DLOCK_ETCD_PROTO_FILES}
    COMMAND ${DLOCK_PROTOC} ${DLOCK_ETCD_PROTO_IMPORTS} --grpc_out=${DLOCK_ETCD_PROTO_INCLUDE_DIR}
            --plugin=protoc-gen-grpc=${DLOCK_GRPC_CPP_PLUGIN} etcd/etcdserver/etcdserverpb/rpc.proto
    DEPENDS ${DLOCK_ETCD_PROTO_PATHS}
    COMMENT "Generating the C++ stubs of etcd's gRPC API (rpc.proto and its imports)"
    VERBATIM)
  add_library(${target} OBJECT ${DLOCK_ETCD_PROTO_SOURCES})
  # Replaces the directory's options (warnings as errors, sanitizers): generated code.
  set_property(TARGET ${target} PROPERTY COMPILE_OPTIONS -w -O1 -g0)
  set_property(TARGET ${target} PROPERTY POSITION_INDEPENDENT_CODE ON)
  target_include_directories(${target} SYSTEM PUBLIC ${DLOCK_ETCD_PROTO_INCLUDE_DIR})
  target_link_libraries(${target} PUBLIC gRPC::grpc++ protobuf::libprotobuf)
endfunction()
