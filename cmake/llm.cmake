# The LLM-driven stages (src/llm): OpenAI-compatible client on libcurl, prompts (prompts/), fenced
# block extraction, verifiers, repair loop, transcripts. Library qattn_llm, linked into qattn_all.
# Included by the top-level CMakeLists.txt after build.cmake (it uses the backend and the build driver).
find_package(CURL REQUIRED)
qattn_library(qattn_llm llm qattn_build qattn_backend qattn_plan qattn_hw qattn_tl qattn_support
              CURL::libcurl nlohmann_json::nlohmann_json)
target_link_libraries(qattn_all INTERFACE qattn_llm)
