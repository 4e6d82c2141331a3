# The pipeline as a library function (src/pipeline: spec -> plan -> TL -> kernel IR -> CUDA -> build ->
# verify), called by `qattn generate`.
qattn_library(qattn_pipeline pipeline qattn_llm qattn_build qattn_backend qattn_plan qattn_hw qattn_tl qattn_support)
target_link_libraries(qattn_all INTERFACE qattn_pipeline)
