# Install layout (docs/install.md) and Debian packages (CPack):
#   bin/gpuslice, bin/gpuslice-node (+ gpuslice-webhook)       programs
#   lib/gpuslice/libgpuslice.so, libgpuslice-addpath.so         injected libraries; `gpuslice run`
#                                                               finds ../lib/gpuslice from its own path
#   share/doc/gpuslice/, share/man/man1/, share/bash-completion/completions/
#   lib/systemd/system/gpuslice-mps.service                      (gpuslice component)
#   lib/systemd/system/gpuslice-node.service, <etc>/default/gpuslice-node   (node component)
# Components: `gpuslice` (library + CLI) and `node` (daemon, packaged as gpuslice-node).

# /etc for a system prefix (/usr), <prefix>/etc otherwise, as GNUInstallDirs does.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(GPUSLICE_ETC_DIR /etc)
else()
  set(GPUSLICE_ETC_DIR ${CMAKE_INSTALL_PREFIX}/etc)
endif()

if(TARGET gpuslice_preload)
  install(TARGETS gpuslice_preload gpuslice_addpath LIBRARY DESTINATION lib/gpuslice COMPONENT gpuslice)
endif()
install(FILES README.md LICENSE NOTICE DESTINATION share/doc/gpuslice COMPONENT gpuslice)
install(DIRECTORY docs/ DESTINATION share/doc/gpuslice/docs COMPONENT gpuslice FILES_MATCHING PATTERN "*.md")
install(FILES packaging/gpuslice.bash-completion DESTINATION share/bash-completion/completions
        RENAME gpuslice COMPONENT gpuslice)

# Man pages: generated from each program's and each command's --help by help2man, so they never
# disagree with it; gzip -9n (no name, no time stamp) as Debian wants them.
find_program(HELP2MAN help2man)
find_program(GZIP gzip)
set(_gpuslice_man_pages "")
# gpuslice_man_page(TARGET PAGE COMPONENT SUMMARY [COMMAND]): PAGE.1.gz from `TARGET [COMMAND] --help`.
function(gpuslice_man_page target page_name component summary)
  if(NOT TARGET ${target} OR NOT HELP2MAN OR NOT GZIP OR CMAKE_CROSSCOMPILING)
    return()
  endif()
  set(page ${CMAKE_BINARY_DIR}/man/${page_name}.1)
  # help2man runs one program: a command of a program gets a two-line wrapper.
  set(program $<TARGET_FILE:${target}>)
  if(ARGC GREATER 4)
    set(wrapper ${CMAKE_BINARY_DIR}/man/bin/${page_name})
    file(GENERATE OUTPUT ${wrapper} CONTENT "#!/bin/sh\nexec '$<TARGET_FILE:${target}>' ${ARGV4} \"$@\"\n"
         FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
    set(program ${wrapper})
  endif()
  add_custom_command(OUTPUT ${page}.gz
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
    COMMAND ${HELP2MAN} --no-info --no-discard-stderr --version-string=${PROJECT_VERSION} --name=${summary}
            --output=${page} ${program}
    COMMAND ${GZIP} -9nf ${page}
    DEPENDS ${target} VERBATIM)
  install(FILES ${page}.gz DESTINATION share/man/man1 COMPONENT ${component})
  set(_gpuslice_man_pages ${_gpuslice_man_pages} ${page}.gz PARENT_SCOPE)
endfunction()
gpuslice_man_page(gpuslice_cli gpuslice gpuslice "share NVIDIA GPUs between processes and containers")
foreach(command_summary
        "run|run a command under a VRAM quota and compute limit"
        "status|show the quotas, usage and processes of a container or a node"
        "top|live view of a container's or a node's GPU use"
        "set|change the limits of a running container"
        "profile|summarize the per-API profiles a job wrote")
  string(REPLACE "|" ";" parts "${command_summary}")
  list(GET parts 0 command)
  list(GET parts 1 summary)
  gpuslice_man_page(gpuslice_cli gpuslice-${command} gpuslice "${summary}" ${command})
endforeach()
if(GPUSLICE_BUILD_NODE_ENABLED)
  gpuslice_man_page(gpuslice-node gpuslice-node node
                    "gpuslice node daemon: GPU discovery, metrics, HTTP API, device plugin, DRA driver, webhook")
  gpuslice_man_page(gpuslice-node gpuslice-node-serve node
                    "the node daemon: NVML, metrics, HTTP API, kubelet device plugin" serve)
  gpuslice_man_page(gpuslice-node gpuslice-webhook node "gpuslice mutating admission webhook" webhook)
endif()
if(_gpuslice_man_pages)
  add_custom_target(gpuslice_man ALL DEPENDS ${_gpuslice_man_pages})
elseif(NOT HELP2MAN)
  message(STATUS "gpuslice: help2man not found, no man pages")
endif()

# What Debian policy wants in every package's doc directory: the copyright file (machine-readable)
# and the changelog, compressed without name or time stamp.
file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/packaging)
if(GZIP)
  execute_process(COMMAND ${GZIP} -9n -c ${PROJECT_SOURCE_DIR}/packaging/changelog
                  OUTPUT_FILE ${CMAKE_BINARY_DIR}/packaging/changelog.gz)
endif()
foreach(doc_component gpuslice node)
  set(doc_package ${doc_component})
  if(doc_component STREQUAL "node")
    set(doc_package gpuslice-node)
    if(NOT GPUSLICE_BUILD_NODE_ENABLED)
      continue()
    endif()
  endif()
  install(FILES packaging/copyright DESTINATION share/doc/${doc_package} COMPONENT ${doc_component})
  if(GZIP)
    # A native package (no Debian revision): changelog.gz, not changelog.Debian.gz.
    install(FILES ${CMAKE_BINARY_DIR}/packaging/changelog.gz DESTINATION share/doc/${doc_package}
            COMPONENT ${doc_component})
  endif()
endforeach()

# `gpuslice mps serve` on a plain host (docs/mps.md): ships with the CLI.
configure_file(packaging/gpuslice-mps.service.in ${CMAKE_BINARY_DIR}/packaging/gpuslice-mps.service @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/packaging/gpuslice-mps.service DESTINATION lib/systemd/system COMPONENT gpuslice)

if(GPUSLICE_BUILD_NODE_ENABLED)
  configure_file(packaging/gpuslice-node.service.in ${CMAKE_BINARY_DIR}/packaging/gpuslice-node.service @ONLY)
  install(FILES ${CMAKE_BINARY_DIR}/packaging/gpuslice-node.service DESTINATION lib/systemd/system COMPONENT node)
  install(FILES packaging/gpuslice-node.default DESTINATION ${GPUSLICE_ETC_DIR}/default RENAME gpuslice-node
          COMPONENT node)
  install(FILES LICENSE NOTICE DESTINATION share/doc/gpuslice-node COMPONENT node)
endif()

# Everything `cmake --install` copies, for `make run` / `make install` to build in one go (the node
# daemon only where its dependencies were found).
set(_gpuslice_installed gpuslice_preload gpuslice_addpath gpuslice_cli)
foreach(optional gpuslice-demo gpuslice-node gpuslice_man)
  if(TARGET ${optional})
    list(APPEND _gpuslice_installed ${optional})
  endif()
endforeach()
add_custom_target(gpuslice_installable DEPENDS ${_gpuslice_installed})

# Debian packages: `cpack -G DEB` in a build configured with -DCMAKE_INSTALL_PREFIX=/usr
# (scripts/test-install.sh).
set(CPACK_PACKAGE_NAME gpuslice)
set(CPACK_PACKAGE_VENDOR gpuslice)
set(CPACK_PACKAGE_CONTACT "gpuslice maintainers <gpuslice@users.noreply.github.com>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "share one NVIDIA GPU between containers with VRAM and compute limits")
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL gpuslice)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Stripped in the packages (libgpuslice.so: 8.6 MB with debug information, about 430 KB without); the
# build tree keeps the unstripped files.
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_GPUSLICE_PACKAGE_NAME gpuslice)
set(CPACK_COMPONENT_GPUSLICE_DESCRIPTION "gpuslice CLI and the injected library (libgpuslice.so)\n\
The library enforces VRAM quotas and compute limits in the processes it is\n\
loaded into; the CLI runs jobs under it and shows and changes their limits.")
if(GPUSLICE_BUILD_NODE_ENABLED)
  list(APPEND CPACK_COMPONENTS_ALL node)
  set(CPACK_DEBIAN_NODE_PACKAGE_NAME gpuslice-node)
  set(CPACK_COMPONENT_NODE_DEPENDS gpuslice)
  set(CPACK_COMPONENT_NODE_DESCRIPTION "gpuslice node daemon\n\
GPU discovery, Prometheus /metrics, an HTTP API, the kubelet device plugin\n\
and the admission webhook.")
  # CPack takes control files by their name: this one must be called "conffiles".
  file(WRITE ${CMAKE_BINARY_DIR}/packaging/node/conffiles "${GPUSLICE_ETC_DIR}/default/gpuslice-node\n")
  set(CPACK_DEBIAN_NODE_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/packaging/node/conffiles)
endif()
include(CPack)
