# Install layout (docs/install.md) and Debian packages (CPack):
#   bin/gpuslice, bin/gpuslice-node (+ gpuslice-webhook)       programs
#   lib/gpuslice/libgpuslice.so, libgpuslice-addpath.so         injected libraries; `gpuslice run`
#                                                               finds ../lib/gpuslice from its own path
#   share/doc/gpuslice/, share/man/man1/, share/bash-completion/completions/
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

# Man pages: generated from each program's --help by help2man, so they never disagree with it.
find_program(HELP2MAN help2man)
set(_gpuslice_man_pages "")
function(gpuslice_man_page target program component summary)
  if(NOT TARGET ${target} OR NOT HELP2MAN OR CMAKE_CROSSCOMPILING)
    return()
  endif()
  set(page ${CMAKE_BINARY_DIR}/man/${program}.1)
  add_custom_command(OUTPUT ${page}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
    COMMAND ${HELP2MAN} --no-info --no-discard-stderr --version-string=${PROJECT_VERSION} --name=${summary}
            --output=${page} $<TARGET_FILE:${target}>
    DEPENDS ${target} VERBATIM)
  install(FILES ${page} DESTINATION share/man/man1 COMPONENT ${component})
  set(_gpuslice_man_pages ${_gpuslice_man_pages} ${page} PARENT_SCOPE)
endfunction()
gpuslice_man_page(gpuslice_cli gpuslice gpuslice "share NVIDIA GPUs between processes and containers")
if(GPUSLICE_BUILD_NODE_ENABLED)
  gpuslice_man_page(gpuslice-node gpuslice-node node
                    "gpuslice node daemon: GPU discovery, metrics, HTTP API, device plugin, DRA driver, webhook")
endif()
if(_gpuslice_man_pages)
  add_custom_target(gpuslice_man ALL DEPENDS ${_gpuslice_man_pages})
elseif(NOT HELP2MAN)
  message(STATUS "gpuslice: help2man not found, no man pages")
endif()

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
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_GPUSLICE_PACKAGE_NAME gpuslice)
set(CPACK_COMPONENT_GPUSLICE_DESCRIPTION
    "gpuslice CLI and the injected library (libgpuslice.so) that enforces VRAM quotas and compute limits")
if(GPUSLICE_BUILD_NODE_ENABLED)
  list(APPEND CPACK_COMPONENTS_ALL node)
  set(CPACK_DEBIAN_NODE_PACKAGE_NAME gpuslice-node)
  set(CPACK_COMPONENT_NODE_DEPENDS gpuslice)
  set(CPACK_COMPONENT_NODE_DESCRIPTION
      "gpuslice node daemon: GPU discovery, /metrics, HTTP API, kubelet device plugin, admission webhook")
  # CPack takes control files by their name: this one must be called "conffiles".
  file(WRITE ${CMAKE_BINARY_DIR}/packaging/node/conffiles "${GPUSLICE_ETC_DIR}/default/gpuslice-node\n")
  set(CPACK_DEBIAN_NODE_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/packaging/node/conffiles)
endif()
include(CPack)
