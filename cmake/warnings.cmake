# Warnings are errors everywhere in the project's own code.
add_compile_options(-Wall -Wextra -Wshadow $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor> -Wcast-align -Wformat=2 -Werror)
# GCC 12 at -O3 reports -Wrestrict inside libstdc++'s own std::string concatenation (GCC bug
# 105329, a false positive fixed in GCC 13); our code has no restrict-qualified copies of its own.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  add_compile_options(-Wno-restrict)
endif()
