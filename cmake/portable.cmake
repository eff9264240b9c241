# Portable injected libraries (docs/portability.md). libgpuslice.so and libgpuslice-addpath.so are
# loaded into every process of a container, whatever its glibc and C++ runtime, so they:
#   - link no C++ runtime: no libstdc++, no libgcc_s, no unwinder; src/portable/cxx_runtime.cpp
#     provides the few out-of-line pieces that header-only containers call;
#   - bind every glibc symbol to the version glibc 2.17 had (src/portable/glibc_pins_<arch>.h,
#     forced into every translation unit that ends up in them, so also into the static libraries
#     the CLI and the tests share with them: harmless there, the pinned versions are the same
#     functions in today's glibc) and carry the few newer functions they use
#     (src/portable/glibc_compat.c);
#   - need only libc, libdl, libpthread and the loader: before glibc 2.34 dlopen and pthread_* live
#     in libdl/libpthread, so those stay in DT_NEEDED even where they are empty.
# scripts/check-portable.sh verifies the result.
set(GPUSLICE_GLIBC_FLOOR 2.17)
option(GPUSLICE_PORTABLE "Build the injected libraries to load on glibc ${GPUSLICE_GLIBC_FLOOR} and newer" ON)

set(_gpuslice_pins "${PROJECT_SOURCE_DIR}/src/portable/glibc_pins_${CMAKE_SYSTEM_PROCESSOR}.h")
if(GPUSLICE_PORTABLE AND GPUSLICE_SANITIZE)
  # Sanitizer runtimes bring their own dependencies (libasan, libstdc++); those builds test
  # behaviour, not portability.
  set(_gpuslice_portable OFF)
elseif(GPUSLICE_PORTABLE AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 13)
  # GCC 13's libstdc++ moves rarely taken std::string paths out of line (_M_replace_cold), which a
  # link without the C++ runtime cannot satisfy; the method is validated with GCC 12 (Debian 12),
  # where release builds are made. Elsewhere the libraries keep a static libstdc++ and need the
  # build host's glibc.
  message(WARNING "gpuslice: GCC ${CMAKE_CXX_COMPILER_VERSION}: the injected libraries are built "
                  "non-portable (they need this host's glibc); build on Debian 12 (GCC 12) for the "
                  "glibc ${GPUSLICE_GLIBC_FLOOR} floor (docs/portability.md)")
  set(_gpuslice_portable OFF)
elseif(GPUSLICE_PORTABLE AND NOT EXISTS "${_gpuslice_pins}")
  message(WARNING "gpuslice: no glibc pins for ${CMAKE_SYSTEM_PROCESSOR}; the injected libraries "
                  "will need this build host's glibc (scripts/gen-glibc-pins.py writes them)")
  set(_gpuslice_portable OFF)
else()
  set(_gpuslice_portable ${GPUSLICE_PORTABLE})
endif()

# gpuslice_pin_glibc(target): binds the target's own glibc references to the floor's versions.
function(gpuslice_pin_glibc target)
  if(_gpuslice_portable)
    target_compile_options(${target} PRIVATE "SHELL:-include ${_gpuslice_pins}")
  endif()
endfunction()

# The project's static and object libraries that `target` links, directly or not.
function(_gpuslice_static_closure target out_var)
  set(seen "")
  set(queue ${target})
  while(queue)
    list(POP_FRONT queue current)
    get_target_property(deps ${current} LINK_LIBRARIES)
    if(NOT deps)
      continue()
    endif()
    foreach(dep IN LISTS deps)
      if(TARGET ${dep} AND NOT dep IN_LIST seen)
        get_target_property(imported ${dep} IMPORTED)
        get_target_property(type ${dep} TYPE)
        if(NOT imported AND type MATCHES "^(STATIC|OBJECT)_LIBRARY$")
          list(APPEND seen ${dep})
          list(APPEND queue ${dep})
        endif()
      endif()
    endforeach()
  endwhile()
  set(${out_var} ${seen} PARENT_SCOPE)
endfunction()

# gpuslice_make_portable(target): applies all of the above to an injected shared library.
function(gpuslice_make_portable target)
  if(NOT _gpuslice_portable)
    # Still self-contained, just tied to this host's glibc.
    target_link_options(${target} PRIVATE -static-libstdc++ -static-libgcc)
    return()
  endif()
  _gpuslice_static_closure(${target} static_deps)
  foreach(lib IN ITEMS ${target} ${static_deps})
    gpuslice_pin_glibc(${lib})
  endforeach()
  target_sources(${target} PRIVATE $<TARGET_OBJECTS:gpuslice_portable_cxx> $<TARGET_OBJECTS:gpuslice_portable_glibc>)
  # -nodefaultlibs keeps the compiler driver from adding libstdc++ and libgcc_s; libgcc.a stays
  # (compiler helpers such as aarch64's outline atomics), linked statically.
  set_target_properties(${target} PROPERTIES LINKER_LANGUAGE CXX)
  target_link_options(${target} PRIVATE -nodefaultlibs -Wl,--no-undefined)
  # The static closure is repeated first so that libgcc.a comes after everything that needs it.
  target_link_libraries(${target} PRIVATE ${static_deps} "-Wl,--push-state,--no-as-needed" "-l:libdl.so.2"
                        "-l:libpthread.so.0" "-Wl,--pop-state" gcc c gcc)
endfunction()

# gpuslice_make_fixture_portable(target...): for the older-glibc stage (scripts/test-old-glibc.sh)
# only: the test programs and the simulated driver keep the system's libstdc++ (the old system's
# one is used at run time) but bind glibc like the injected library does, so that they run under
# the same old glibc. Shared libraries also get the few C++ runtime functions newer than that
# libstdc++ (hidden behind their version scripts).
function(gpuslice_make_fixture_portable)
  if(NOT _gpuslice_portable)
    message(FATAL_ERROR "gpuslice: GPUSLICE_PORTABLE_FIXTURES needs GPUSLICE_PORTABLE and no sanitizer")
  endif()
  foreach(target IN LISTS ARGN)
    _gpuslice_static_closure(${target} static_deps)
    foreach(lib IN ITEMS ${target} ${static_deps})
      gpuslice_pin_glibc(${lib})
      target_compile_options(${lib} PRIVATE "SHELL:-include ${PROJECT_SOURCE_DIR}/src/portable/glibc_pin_dlsym.h")
      # One source at a time, as they ship (a batch would put the start-up shim beside main).
      set_target_properties(${lib} PROPERTIES UNITY_BUILD OFF)
    endforeach()
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE")
      target_sources(${target} PRIVATE $<TARGET_OBJECTS:gpuslice_portable_glibc>
                     ${PROJECT_SOURCE_DIR}/tests/portable/old_glibc_start.c)
      target_link_options(${target} PRIVATE -Wl,--wrap=__libc_start_main)
    elseif(type STREQUAL "SHARED_LIBRARY")
      target_sources(${target} PRIVATE $<TARGET_OBJECTS:gpuslice_portable_glibc> $<TARGET_OBJECTS:gpuslice_portable_cxx>)
    endif()
  endforeach()
endfunction()
