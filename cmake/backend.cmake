# Stage 2 (src/backend): TL code -> CUDA C++ on CuTe. Library qattn_backend, the test-only tool
# qattn_translate (tools/translate_main.cc: code.tl -> k.cu), and the umbrella link.
# Included by the top-level CMakeLists.txt after stages.cmake.
qattn_library(qattn_backend backend qattn_plan qattn_tl qattn_hw qattn_support)
target_compile_definitions(qattn_backend PUBLIC QATTN_DEVICE_DIR="${CMAKE_SOURCE_DIR}/device")
target_link_libraries(qattn_all INTERFACE qattn_backend)

add_executable(qattn_translate ${CMAKE_SOURCE_DIR}/tools/translate_main.cc)
target_link_libraries(qattn_translate PRIVATE qattn_all)
# One subfolder per kernel family (src/backend/sm90/, src/backend/mma/): part of the same library.
file(GLOB qattn_backend_families CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/backend/*/*.cc)
target_sources(qattn_backend PRIVATE ${qattn_backend_families})
