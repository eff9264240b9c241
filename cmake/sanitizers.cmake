if(GPUSLICE_SANITIZE)
  message(STATUS "gpuslice: building with -fsanitize=${GPUSLICE_SANITIZE}")
  add_compile_options(-fsanitize=${GPUSLICE_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${GPUSLICE_SANITIZE})
  if(GPUSLICE_SANITIZE MATCHES "undefined")
    # The injected library is built without RTTI; UBSan's vptr check needs RTTI on both sides and
    # reports every virtual call across that boundary. All other UB checks stay on.
    add_compile_options(-fno-sanitize=vptr)
  endif()
endif()
