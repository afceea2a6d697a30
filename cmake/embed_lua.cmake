# dlock_embed_lua(OUT_CPP file.lua...): turns each Lua script into an entry of
# `dlock::redis::detail::lua::embedded` {stem, text, SHA1 for EVALSHA}, so scripts stay readable
# .lua files in the tree and a new lock kind adds scripts without touching C++ declarations.
function(dlock_embed_lua out_cpp)
  set(body "// Generated from src/redis/lua/*.lua by cmake/embed_lua.cmake. Do not edit.\n#include <cstddef>\n#include <string_view>\nnamespace dlock::redis::detail::lua {\nstruct embedded_script { std::string_view name, text, sha1; };\nextern const embedded_script embedded[];\nextern const std::size_t embedded_count;\nconst embedded_script embedded[] = {\n")
  set(count 0)
  foreach(lua_file IN LISTS ARGN)
    get_filename_component(stem "${lua_file}" NAME_WE)
    file(READ "${lua_file}" text)
    string(SHA1 sha "${text}")
    string(APPEND body "    {\"${stem}\", R\"dlock_lua(${text})dlock_lua\", \"${sha}\"},\n")
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${lua_file}")
    math(EXPR count "${count} + 1")
  endforeach()
  string(APPEND body "};\nconst std::size_t embedded_count = ${count};\n}  // namespace dlock::redis::detail::lua\n")
  file(CONFIGURE OUTPUT "${out_cpp}" CONTENT "${body}" @ONLY)
endfunction()
