# The build driver (src/build): Translation -> shared library through nvcc, with the cache.
qattn_library(qattn_build build qattn_backend qattn_support)
target_link_libraries(qattn_all INTERFACE qattn_build)
