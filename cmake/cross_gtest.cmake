# Cross builds: Debian ships GoogleTest compiled for the build machine only, so it is built from
# its sources (libgtest-dev installs them in /usr/src/googletest) for the target architecture, on
# demand (EXCLUDE_FROM_ALL: only targets that link it compile it).
if(NOT GTest_FOUND AND CMAKE_CROSSCOMPILING AND EXISTS /usr/src/googletest/CMakeLists.txt)
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  add_subdirectory(/usr/src/googletest ${CMAKE_BINARY_DIR}/googletest EXCLUDE_FROM_ALL)
  foreach(lib gtest gtest_main gmock gmock_main)
    if(TARGET ${lib} AND NOT TARGET GTest::${lib})
      add_library(GTest::${lib} ALIAS ${lib})
    endif()
  endforeach()
  set(GTest_FOUND ON)
endif()
